"""The evaluation edge: labeled questions and BEIR folders against an index, and tuning."""
