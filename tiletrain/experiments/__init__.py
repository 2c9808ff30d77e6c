"""Experiment drivers above the model layers: they import nn, pipeline and trace, and nothing
below imports them (imports run one way: trace <- pipeline <- experiments).

  workloads   gemm, transformer block, synthetic pipeline and GPT steps for the trace tools
  sweep       policy x tile x workers x priority grid (`tiletrain bench sched`)
  pipeline    pipelines in miniature against the formulas (`tiletrain trace pipeline`)
  cli         `tiletrain trace ...` and `tiletrain bench sched`
"""
