"""Evaluation: the multi-domain corpus, leave-one-domain-out scoring, fitting the answerability
scorer, and the policy's rule count. Depends on `policy` and `kb`; nothing there imports it."""
