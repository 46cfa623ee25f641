"""The one GPU every stand-in shares: memory, streams, stream capture and graphs, kept in host memory.

A "device pointer" is the address of a host buffer this object owns, so the real code's ctypes views and
copies work on it unchanged, and a copy past an allocation's end is refused instead of corrupting memory.
Stream capture is modelled as CUDA documents it: work enqueued on a capturing stream is recorded, not run;
`cudaStreamEndCapture` gives the graph, or `cudaErrorStreamCaptureInvalidated` when something enqueued during
the capture failed (a DLA engine's enqueue is the known case: NVIDIA/TensorRT#3524).
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import Callable


@dataclass
class Stream:
    handle: int
    capturing: bool = False
    invalidated: bool = False
    recorded: list = field(default_factory=list)

    def __int__(self) -> int:  # cuda-python's cudaStream_t converts with int()
        return self.handle


@dataclass
class Graph:
    ops: list


class Device:
    """Allocations by address, streams by handle, and what the stand-ins observed (for the tests)."""

    def __init__(self, name: str = "Orin (stand-in)", major: int = 8, minor: int = 7, dla_cores: int = 2,
                 runtime_version: int = 11040) -> None:
        self.name, self.major, self.minor, self.dla_cores = name, major, minor, dla_cores
        self.runtime_version = runtime_version  # what cudaRuntimeGetVersion answers (11040: CUDA 11.4)
        self.allocations: dict[int, ctypes.Array] = {}
        self.streams: dict[int, Stream] = {}
        self.fail_next_capture = False  # a test's knob: the next enqueue under capture fails
        self.events: list[str] = []  # notable calls, in order (the tests read them)
        self.calibration: list[dict] = []  # what each calibration batch read: bytes, the binding's bytes, data
        self._next_handle = 1

    # ------------------------------------------------------------------------------------------- memory
    def malloc(self, nbytes: int) -> int:
        buf = (ctypes.c_byte * max(int(nbytes), 1))()
        addr = ctypes.addressof(buf)
        self.allocations[addr] = buf
        return addr

    def free(self, addr: int) -> bool:
        return self.allocations.pop(int(addr), None) is not None

    def extent(self, addr: int) -> int:
        """How many bytes from `addr` to the end of the allocation holding it; 0 if it is in none."""
        addr = int(addr)
        for base, buf in self.allocations.items():
            if base <= addr < base + len(buf):
                return base + len(buf) - addr
        return 0

    def copy(self, dst: int, src: int, nbytes: int, device_side: tuple[int, ...]) -> bool:
        """memmove, refused (False) when a device-side address (`device_side`: dst, src or both) is not inside
        one allocation for all `nbytes`; the host side may be pageable memory (a numpy array's buffer)."""
        if any(self.extent(addr) < nbytes for addr in device_side):
            return False
        ctypes.memmove(int(dst), int(src), int(nbytes))
        return True

    def read(self, addr: int, nbytes: int) -> bytes:
        if self.extent(addr) < nbytes:
            raise ValueError(f"stand-in device: reading {nbytes} bytes at {addr:#x} runs past its allocation "
                             f"({self.extent(addr)} bytes left)")
        return ctypes.string_at(int(addr), int(nbytes))

    def write(self, addr: int, data: bytes) -> None:
        if self.extent(addr) < len(data):
            raise ValueError(f"stand-in device: writing {len(data)} bytes at {addr:#x} runs past its allocation")
        ctypes.memmove(int(addr), data, len(data))

    # ------------------------------------------------------------------------------------------ streams
    def new_stream(self) -> Stream:
        stream = Stream(self._next_handle)
        self._next_handle += 1
        self.streams[stream.handle] = stream
        return stream

    def stream(self, handle) -> Stream:
        h = int(handle)
        if h not in self.streams:
            raise ValueError(f"stand-in device: {h} is not a live stream")
        return self.streams[h]

    def enqueue(self, handle, op: Callable[[], bool], what: str) -> bool:
        """Run `op` now, or record it when the stream is capturing; False when it failed (or, under capture,
        when it cannot be captured: the capture is then invalidated, as CUDA does)."""
        stream = self.stream(handle) if int(handle) else None
        if stream is not None and stream.capturing:
            if self.fail_next_capture or getattr(op, "uncapturable", False):
                self.fail_next_capture = False
                stream.invalidated = True
                self.events.append(f"capture failed: {what}")
                return False
            stream.recorded.append(op)
            return True
        return op()
