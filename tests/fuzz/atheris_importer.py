"""Coverage-guided fuzzing of the ONNX importer with atheris (libFuzzer for Python).

    python tests/fuzz/atheris_importer.py -runs=100000 -max_total_time=600 [corpus_dir]

Each input is taken as ONNX bytes, and half the time as a mutation of a seed model's
bytes (tests/fuzz/seeds.py): `tk.frontend.from_onnx` must return a module or raise a
TensorkilnError. Any other exception is a crash atheris reports (and saves as
crash-<hash>); tests/fuzz/test_atheris.py runs a bounded number of inputs in CI.
"""
import sys

import atheris

with atheris.instrument_imports():
    import onnx  # noqa: F401  (instrumented: the protobuf parsing paths count as coverage too)
    from tensorkiln.frontend import from_onnx
    from tensorkiln.ir.errors import TensorkilnError

_SEED = None


def _seed() -> bytes:
    global _SEED
    if _SEED is None:
        from pathlib import Path
        _SEED = (Path(__file__).resolve().parents[2] / "examples" / "models" / "small_cnn.onnx").read_bytes()
    return _SEED


def test_one_input(data: bytes) -> None:
    provider = atheris.FuzzedDataProvider(data)
    if provider.ConsumeBool():
        seed = bytearray(_seed())
        for _ in range(provider.ConsumeIntInRange(1, 8)):
            if not seed:
                break
            seed[provider.ConsumeIntInRange(0, len(seed) - 1)] = provider.ConsumeIntInRange(0, 255)
        payload = bytes(seed)
    else:
        payload = provider.ConsumeBytes(provider.remaining_bytes())
    try:
        from_onnx(payload, shape={"input": (1, 3, 32, 32)})
    except TensorkilnError:
        pass


if __name__ == "__main__":
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()
