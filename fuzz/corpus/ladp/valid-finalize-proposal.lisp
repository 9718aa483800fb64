(msg finalize-proposal llm-assistant controller 1746176400000
  (data
    (proposal-id "MetaOrgPrinciples_v1.0")
    (status "finalized")
    (support-rate 1.0)
  )
)
