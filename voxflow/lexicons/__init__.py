"""Pronunciation lexicons (issue 44): words -> IPA or respellings, stored and applied.

- `lexicon.py`: the JSON shape, its checks (`parse_lexicon`) and `Lexicon` (matching, version);
- `pls.py`: W3C PLS files into the same shape;
- `apply.py`: a lexicon applied to a parsed input before the front end phonemizes it;
- `store.py`: the folder of saved lexicons, their versions and change listeners.

docs/api.md, "Pronunciation lexicons", is the user's view.
"""
