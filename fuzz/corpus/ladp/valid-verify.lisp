(verify
  (target-msg <msg-id>)
  (checks (syntax logical-consistency external-grounding formal-consistency))
  (result passed|failed)
  (confidence <0.0–1.0>)
  (reason? "<failure-reason>"))
