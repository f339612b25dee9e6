"""Evaluation code outside the sift_ir package: the peers (eval.peers) and the reference
scripts (eval.reference), run from the repository root as `python3 -m eval.<...>`."""
