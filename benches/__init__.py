"""The benchmark drivers: modules run from the repository root, `python3 -m benches.<driver>`."""
