"""Model families: each a small graph of stages behind the `ModelFamily` contract."""
