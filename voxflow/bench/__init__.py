"""The benchmark harness behind ``voxflow bench``: latency, throughput, streaming viability,
reproducibility, and A/B comparison of servers started in rotation.

One module per job:

- `timeline`: one request as the client saw it, and its metrics (TTFA, RTF, stalls);
- `metrics`: per-level statistics and median-with-range over repeats;
- `decode`: response bytes to audio samples as they arrive (pcm, wav, sse, compressed);
- `adapters`: the request and decoding for each server API (openai, piper-http);
- `client`: one request, timed;  `runner`: concurrency levels, warm-up, repeats;
- `idle`: the idle gate;  `machine`: what the report says about the machine;
- `check`: ``--check N`` audio fingerprints;  `report`: tables and JSON;
- `arms`: servers started, health-polled and stopped;  `compare`: rotation, pooling, verdicts;
- `quality`: word error rate and speaker similarity of each arm's audio;
- `options` and `command`: the CLI's options and what the commands do.
"""
