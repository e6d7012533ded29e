"""Long-form jobs: a whole text in, audio on disk segment by segment, resumable (docs/api.md,
"Long-form jobs"). `chapters` cuts the text, `store` keeps a job on disk, `runner` synthesizes
it through the engine, `manager` holds the jobs of one server or one `voxflow speak --long`."""
