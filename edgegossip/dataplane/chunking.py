"""How a flat float32 parameter vector is cut into chunks (one chunk = one datagram payload) and
how RPS blocks map onto whole chunks. A mask holds one byte per chunk."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ChunkPlan:
    n_params: int  # length of the flat float32 vector
    chunk_bytes: int  # payload bytes per datagram, a multiple of 4

    @property
    def chunk_elems(self) -> int:
        return self.chunk_bytes // 4

    @property
    def n_chunks(self) -> int:
        return -(-self.n_params // self.chunk_elems)

    @property
    def model_bytes(self) -> int:
        return self.n_params * 4

    def chunk_range(self, c: int) -> tuple[int, int]:
        """Byte range [start, stop) of chunk c."""
        start = c * self.chunk_bytes
        return start, min(start + self.chunk_bytes, self.model_bytes)

    def block_chunks(self, block: int, n_blocks: int) -> range:
        """Chunks of RPS block `block` of n_blocks (contiguous, sizes differ by at most one)."""
        if not 0 <= block < n_blocks:
            raise ValueError(f"block {block} outside 0..{n_blocks - 1}")
        q, r = divmod(self.n_chunks, n_blocks)
        start = block * q + min(block, r)
        return range(start, start + q + (1 if block < r else 0))

    def elem_range(self, chunks: range) -> tuple[int, int]:
        """Element range covered by a contiguous run of chunks."""
        if len(chunks) == 0:
            return 0, 0
        return chunks.start * self.chunk_elems, min(chunks.stop * self.chunk_elems, self.n_params)
