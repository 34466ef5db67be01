"""How workflow code calls out: the one table of activity options, the task queues, the run-wide
activity slots, the model call, work side by side, failures as a sentence, and the decoding of a
workflow's raw inputs. Shared by the research pipeline and the content flows."""
