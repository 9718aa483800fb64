(msg task-init controller gateway 1746176400000
  (data (skill summarize) (task "Summarize \"LADP\" in one line.") (policy strict-eu)
        (deadline "2025-05-01T12:00:00+09:00") (quorum 3/4) (timeout 90)))
