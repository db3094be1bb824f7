"""Imported first by the entry scripts, for one side effect: two libraries' import-time notices are dropped.

On CPUs with AVX512-BF16, ``import bitsandbytes`` (which peft and TRL do when they are imported)
logs that an optional kernel from the hub ("kernels-community") could not be loaded. bitsandbytes
then uses its own kernel, so the line is noise, and it would precede every line of ours, errors
included. Where the ``kernels`` package is installed (transformers requires it from 5.25), the fetch
itself logs a second line under ``HF_HUB_OFFLINE`` (the kernel's publisher cannot be checked offline).
The filter sits on those two loggers and drops only records naming that kernel; it has to be in place
before bitsandbytes is imported, hence a module imported before any library.

Where DeepSpeed is installed (the ``deepspeed`` extra), transformers imports it, and it warns on every
CPU run that it was "unable to detect" a GPU: on the cpu profile that is the plan, not news.
"""

import logging

NOTICE_LOGGERS = ("bitsandbytes.backends.cpu.ops", "kernels._internals.hf_hub")


class DropKernelNotice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "kernels-community" not in record.getMessage()


for name in NOTICE_LOGGERS:
    logging.getLogger(name).addFilter(DropKernelNotice())


class DropCpuAcceleratorNotice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "Setting accelerator to CPU" not in record.getMessage()


logging.getLogger("DeepSpeed").addFilter(DropCpuAcceleratorNotice())
