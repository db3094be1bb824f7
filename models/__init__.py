"""The model a run trains or evaluates: where it comes from, how it loads (quantized or not, with
transformers or vLLM), and how much memory it will need.
"""
