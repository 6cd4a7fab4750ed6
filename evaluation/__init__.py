"""Evaluation: gold cases, metrics, single-KB and leave-one-domain-out scoring, calibration, the
decide benchmark, fitting the answerability scorer and the rule count. Depends on policy and kb."""
