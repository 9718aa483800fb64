(phase DIVERGE)   ; idea generation mode
(phase CONVERGE)  ; option refinement mode
(phase DECIDE)    ; decision & execution mode
