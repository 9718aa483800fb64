(param-sweep
  (parameter <symbol>)
  (range (start <value>) (end <value>) (step <value>)))