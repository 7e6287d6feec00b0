"""Verifier: a candidate is accepted only when it is proven to compute what the submitted kernel computes."""
