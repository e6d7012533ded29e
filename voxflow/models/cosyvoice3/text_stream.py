"""Text ids for text that arrives in pieces (spec addendum §9 "Bistream input", §3 on the
reference's per-chunk tokenisation).

The reference tokenises each caller chunk on its own, so a word split across two chunks gets
other ids than in the whole text (§3). voxflow commits the ids of the complete matches of the
Qwen2 pre-tokenisation pattern (`text.QWEN2_PATTERN`) that appended text can no longer change:
all but the last match, and none that reaches into a trailing run of whitespace (the pattern's
whitespace alternatives look past a run, so "\\n " then "\\n" is one pre-token, not two). The rest
is held until more text or the end arrives. BPE never merges across pre-tokens, so the committed
ids equal those of the whole text, whatever the chunking (tested on random splits). User text is
read with special-token markers as plain text (spec §11), so no marker can straddle two pieces.

Text is NFC-normalised as it is held; a combining mark sent after its base letter was committed
(only a non-letter base can be: a letter run is always held) is the one case that may differ.
"""

from __future__ import annotations

import unicodedata

from voxflow.models.cosyvoice3.text import QWEN2_PATTERN, CosyVoice3Tokenizer


class IncrementalTokenizer:
    """Pieces of text in, ids out as soon as they can no longer change (see the module doc)."""

    def __init__(self, tokenizer: CosyVoice3Tokenizer) -> None:
        import regex  # tiktoken's own dependency: \\p{L} classes, as the pattern needs

        self._tokenizer = tokenizer
        self._pattern = regex.compile(QWEN2_PATTERN)
        self._trailing_space = regex.compile(r"\s+\Z")
        self._held = ""

    def push(self, text: str) -> list[int]:
        """The ids that `text` (appended to what is held) commits; the rest stays held."""
        return [i for _, ids in self.push_pieces(text) for i in ids]

    def push_pieces(self, text: str) -> list[tuple[str, list[int]]]:
        """`push`, the committed ids grouped by pre-token: (its text, NFC; its ids) in order."""
        self._held = unicodedata.normalize("NFC", self._held + text)
        matches = list(self._pattern.finditer(self._held))
        if len(matches) < 2:
            return []
        trailing = self._trailing_space.search(self._held)
        limit = min(matches[-1].start(), trailing.start() if trailing else len(self._held))
        final = [m for m in matches if m.end() <= limit]
        if not final:
            return []
        self._held = self._held[final[-1].end() :]
        return [(m.group(), self._tokenizer.encode_ordinary(m.group())) for m in final]

    def finish(self) -> list[int]:
        """The ids of everything still held (the end of the text)."""
        return [i for _, ids in self.finish_pieces() for i in ids]

    def finish_pieces(self) -> list[tuple[str, list[int]]]:
        """`finish` as one piece (the held text, its ids), or none when nothing is held."""
        ready, self._held = self._held, ""
        return [(ready, self._tokenizer.encode_ordinary(ready))] if ready else []

    def drop_held(self) -> str:
        """Give up the held text (a generation that rolls over); returns it."""
        held, self._held = self._held, ""
        return held

    @property
    def held(self) -> str:
        """Text received whose ids are not committed yet."""
        return self._held
