"""``encoder.onnx`` on the OpenVINO runtime, behind ONNX Runtime's ``run`` interface.

OpenVINO reads ONNX graphs directly, including the int8 graphs with QuantizeLinear /
DequantizeLinear pairs that ``fractal quantize --recipe openvino-int8`` writes (static int8 from
NNCF), which its CPU plugin runs as int8 kernels (AVX512-VNNI, AMX where the CPU has them).
ONNX Runtime runs the same graph correctly but slower, since it was calibrated and laid out for
OpenVINO; ``benchmarks/encoder_throughput`` measures both.

:class:`OpenVinoSession` gives the service's encoder (:class:`encoding.encoder.OnnxEncoder`) and
the trainer's checks (:mod:`training.bundle_embeddings`) what they use of an
``onnxruntime.InferenceSession``: ``run(output_names, feeds)`` and ``get_providers()``. One
compiled model serves every thread; each thread gets its own infer request (a request is not
safe to share).
"""

from __future__ import annotations

import importlib.util
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

PROVIDER = "OpenVINO CPU"
"""What :meth:`OpenVinoSession.get_providers` names, next to ONNX Runtime's provider names."""


def openvino_installed() -> bool:
    """Whether the ``openvino`` package can be imported (without importing it)."""
    return importlib.util.find_spec("openvino") is not None


class OpenVinoSession:
    """An ONNX graph compiled for OpenVINO's CPU plugin on ``threads`` inference threads (0:
    OpenVINO's default, every core), one stream, tuned for latency (the service runs one
    encoder call at a time).

    ``precision`` is what the floating-point parts compute in. OpenVINO's own default is bf16
    on CPUs that have it (AMX, AVX512-BF16), which moves fp32 embeddings by about 1e-3; the
    default here, ``f32``, keeps the graph's answers (``bf16`` is measured by the encoder
    benchmark)."""

    def __init__(self, path: Path, threads: int, precision: str = "f32") -> None:
        import openvino

        core = openvino.Core()
        config = {
            "INFERENCE_NUM_THREADS": threads,
            "NUM_STREAMS": 1,
            "PERFORMANCE_HINT": "LATENCY",
            "INFERENCE_PRECISION_HINT": precision,
            # OpenVINO pins its threads to cores by default: every process on the same ones, so
            # two `fractal embed` workers of one thread each shared one core (240 paragraphs/s
            # each, 460 unpinned), and a pinned encoder thread keeps the service's other work off
            # its core. The operating system places them better.
            "ENABLE_CPU_PINNING": False,
        }
        self._compiled = core.compile_model(core.read_model(str(path)), "CPU", config)
        self._outputs = {output.get_any_name(): output for output in self._compiled.outputs}
        self._local = threading.local()

    def get_providers(self) -> list[str]:
        return [PROVIDER]

    def run(self, output_names: Sequence[str], feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        """The named outputs for ``feeds``, as ONNX Runtime's ``InferenceSession.run`` returns
        them."""
        request = getattr(self._local, "request", None)
        if request is None:
            request = self._local.request = self._compiled.create_infer_request()
        # Shared, not copied, in and out: the inputs are fresh arrays of the caller's, and each
        # output is copied here before the request's next call reuses its buffer (a copy in
        # and out costs a few tenths of a millisecond per call, a fifth of a short text's).
        results = request.infer(dict(feeds), share_inputs=True, share_outputs=True)
        return [np.array(results[self._outputs[name]]) for name in output_names]
