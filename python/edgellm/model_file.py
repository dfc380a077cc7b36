"""`edgellm.ModelFile`: read a GGUF file's metadata and tensors without loading a model.

The file is memory-mapped and validated by the C++ reader (cpp/src/gguf/); malformed files raise
`edgellm.ModelFormatError` naming the path and the field at fault. Shapes are in numpy order
(the reverse of ggml's `ne`), matching what `gguf.quants.dequantize` returns.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from . import _core


@dataclass(frozen=True)
class TensorInfo:
    name: str
    type: str  # ggml type name, e.g. "Q4_K"
    shape: Tuple[int, ...]  # numpy order
    nbytes: int
    n_elements: int
    offset: int  # relative to the data section


class ModelFile:
    """A memory-mapped GGUF file.

    >>> with ModelFile("model.gguf") as f:
    ...     f.metadata["general.architecture"], f.tensors["output_norm.weight"].shape
    """

    def __init__(self, path: "str | os.PathLike[str]"):
        self.path = os.fspath(path)
        self._file: Optional[_core.GgufFile] = _core.GgufFile.open(self.path)
        self._metadata: Optional[Dict[str, Any]] = None
        self._tensors: Optional[Dict[str, TensorInfo]] = None

    # ---- lifetime ----
    def _open_file(self) -> "_core.GgufFile":
        if self._file is None:
            raise ValueError(f"{self.path}: ModelFile is closed")
        return self._file

    def close(self) -> None:
        """Release this object's mapping. Views from `.raw()` keep their bytes mapped until
        they are garbage-collected; every other access afterwards raises ValueError."""
        self._file = None
        self._metadata = None
        self._tensors = None

    @property
    def closed(self) -> bool:
        return self._file is None

    def __enter__(self) -> "ModelFile":
        self._open_file()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._file is None else f"v{self._file.version}, {len(self.tensors)} tensors"
        return f"ModelFile({self.path!r}, {state})"

    # ---- header facts ----
    @property
    def version(self) -> int:
        return self._open_file().version

    @property
    def alignment(self) -> int:
        return self._open_file().alignment

    @property
    def file_size(self) -> int:
        return self._open_file().file_size

    @property
    def shard_paths(self) -> List[str]:
        """A split model's shard files, the first included; [path] for a plain file."""
        return list(self._open_file().shard_paths)

    @property
    def total_size(self) -> int:
        """Bytes of every shard together (file_size for a plain file)."""
        return self._open_file().total_size

    @property
    def data_offset(self) -> int:
        """Absolute file offset of the tensor data section."""
        return self._open_file().data_offset

    # ---- metadata and tensors ----
    @property
    def metadata(self) -> Dict[str, Any]:
        """key -> value: int, float, bool, str, or a list of those for arrays."""
        f = self._open_file()
        if self._metadata is None:
            self._metadata = f.metadata()
        return self._metadata

    @property
    def metadata_types(self) -> Dict[str, str]:
        """key -> GGUF value type name, e.g. 'UINT32', 'ARRAY[STRING]'."""
        return self._open_file().metadata_types()

    @property
    def tensors(self) -> Dict[str, TensorInfo]:
        """name -> TensorInfo, in file order."""
        f = self._open_file()
        if self._tensors is None:
            self._tensors = {t[0]: TensorInfo(*t) for t in f.tensor_infos()}
        return self._tensors

    def dequantize(self, name: str):
        """The tensor as a float32 numpy array of shape `tensors[name].shape`."""
        return self._open_file().dequantize(name)

    def raw(self, name: str):
        """Zero-copy, read-only numpy uint8 view of the tensor's bytes; it keeps the mapping
        alive on its own, even after `close()`."""
        return self._open_file().raw(name)
