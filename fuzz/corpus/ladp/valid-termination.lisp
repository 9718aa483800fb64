(termination-condition (or unanimous (weighted-agreement >=0.9)))
(transition-condition "integration-sufficient")