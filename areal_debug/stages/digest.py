# SPDX-License-Identifier: Apache-2.0
"""Exact tensor digests, computed where the tensor lives.

A digest is two 64-bit integer sums over a tensor's bit patterns, read as
integers: ``s1 = sum(b_i)`` and ``s2 = sum(b_i * (i + 1))`` with ``i`` the
element's index in the whole (unsharded) tensor, both modulo 2**64. Any single
changed bit changes ``s1``; a swap of two values changes ``s2``. Integer sums
wrap the same way in any order, so the digest does not depend on how a
reduction is split, and the digest of a sharded tensor is the sum of its
shards' digests: each data-parallel rank digests its own shard and the small
pairs are summed across ranks.

Two ways to the same sums, one per kind of device:

- on the CPU, where a call costs nothing and memory is slow, each tensor on its
  own, element by element with its index, in cache-sized chunks;
- on an accelerator, where each kernel launch costs tens of microseconds and a
  model has hundreds of tensors, all of a call's tensors together by row sums
  (``_row_sums``): a fixed number of kernels per 16 M elements and per call,
  not per tensor. The stage digests of a training step are then a few hundred
  launches, where one set per tensor was ten thousand: 0.24 s of a 1.5B model's
  36 s step on an H200, where they took a second.
"""

from __future__ import annotations

import torch

_INT_OF_SIZE = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
# Elements digested per pass: bounds the temporaries (128 MiB each). On the CPU a
# pass that fits in the core's cache (512 KiB temporaries) is several times
# faster than one that streams through memory: 13 ms against 94 ms for 7 M
# float32 values on one thread here.
_CHUNK = 1 << 24
_CPU_CHUNK = 1 << 16
# Elements per row of the row sums: at most 2**10 for them to be exact (see
# _row_sums), and a divisor of _CHUNK, so that chunks of a tensor are whole rows.
_ROW = 1 << 10
# Digest sums are kept modulo 2**64.
MASK = (1 << 64) - 1
# The row sums' left-hand side, per device: a row of ones, a row of 0..ROW-1.
_ROW_WEIGHTS: dict[torch.device, torch.Tensor] = {}


def _on_cpu(device: torch.device) -> bool:
    """Where a kernel call costs no launch and memory, not arithmetic, is slow."""
    return device.type == "cpu"


def _bits(t: torch.Tensor) -> torch.Tensor:
    """``t``'s elements' bit patterns as integers of the same width (a view)."""
    x = t.detach()
    if x.dtype == torch.bool:
        x = x.to(torch.uint8)
    if x.is_complex():
        x = torch.view_as_real(x)
    return x.contiguous().reshape(-1).view(_INT_OF_SIZE[x.element_size()])


def _int64(x: int) -> int:
    """``x`` modulo 2**64, as the signed value an int64 tensor holds."""
    return (x + (1 << 63)) % (1 << 64) - (1 << 63)


def digest_hex(pair) -> str:
    """The printable digest: 32 hex digits (s1 then s2, unsigned)."""
    s1, s2 = (int(v) & MASK for v in pair)
    return f"{s1:016x}{s2:016x}"


def digest_pair(t: torch.Tensor, offset: int = 0) -> torch.Tensor:
    """``[s1, s2]`` (int64, on ``t``'s device) of ``t``'s bits; ``offset`` is the
    flat index of ``t``'s first element in the whole tensor it is a shard of."""
    return digest_pairs([t], [offset])[0]


def digest_pairs(tensors: list[torch.Tensor], offsets: list[int]) -> torch.Tensor:
    """``[n, 2]``: ``digest_pair`` of each tensor, on their device."""
    if not tensors:
        return torch.zeros((0, 2), dtype=torch.int64)
    out: list = [None] * len(tensors)
    bits = [_bits(t) for t in tensors]
    groups: dict[tuple, list[int]] = {}
    for i, b in enumerate(bits):
        if _on_cpu(b.device) or b.element_size() == 8:
            # Row sums would not be exact for 8-byte patterns (rare on an
            # accelerator: float64 tensors).
            out[i] = _by_index(b, offsets[i] + 1)
        else:
            groups.setdefault((b.device, b.dtype), []).append(i)
    for members in groups.values():
        pairs = _by_rows([bits[i] for i in members], [offsets[i] + 1 for i in members])
        if len(members) == len(tensors):
            return pairs  # one group, in order: no per-tensor views to restack
        for i, pair in zip(members, pairs):
            out[i] = pair
    return torch.stack(out)


def _by_index(bits: torch.Tensor, first: int) -> torch.Tensor:
    """One tensor's digest, chunk by chunk, each element times its index."""
    out = torch.zeros(2, dtype=torch.int64, device=bits.device)
    step = _CPU_CHUNK if _on_cpu(bits.device) else _CHUNK
    for start in range(0, bits.numel(), step):
        chunk = bits[start : start + step].to(torch.int64)
        index = torch.arange(
            first + start,
            first + start + chunk.numel(),
            dtype=torch.int64,
            device=chunk.device,
        )
        out[0] += chunk.sum()
        out[1] += (chunk * index).sum()
    return out


def token_digests(x: torch.Tensor) -> torch.Tensor:
    """``[tokens, 2]`` int64: each token's (first dimension) digest of its values'
    bits, the same two sums as a tensor's digest (``digest.py``) over that
    token's row alone."""
    rows = x.detach().reshape(x.shape[0], -1)
    bits = _bits(rows).reshape(rows.shape).to(torch.int64)
    index = torch.arange(1, rows.shape[1] + 1, dtype=torch.int64, device=rows.device)
    return torch.stack([bits.sum(1), (bits * index).sum(1)], 1)


def span_digests(
    per_token: torch.Tensor, spans: list[tuple[int, int]], width: int
) -> torch.Tensor:
    """``[len(spans), 2]``: the digest of tokens ``start:end`` (``width`` values
    each) as one tensor, for each span, from the tokens' digests. The value at
    column c of a span's k-th token has the flat index ``k * width + c``, so
    ``s1 = sum_k s1_k`` and ``s2 = sum_k s2_k + width * sum_k k * s1_k``, each
    sum a difference of prefix sums over the row (k = t - start); int64 wraps
    modulo 2**64 as the digest does, so every step is exact."""
    s1, s2 = per_token[:, 0], per_token[:, 1]
    t = torch.arange(per_token.shape[0], dtype=torch.int64, device=per_token.device)
    prefix = torch.nn.functional.pad(torch.stack([s1, s2, t * s1]).cumsum(1), (1, 0))
    starts = torch.tensor([a for a, _ in spans], device=per_token.device)
    ends = torch.tensor([b for _, b in spans], device=per_token.device)
    p1, p2, q = prefix[:, ends] - prefix[:, starts]
    return torch.stack([p1, p2 + width * (q - starts * p1)], 1)


def _by_rows(bits: list[torch.Tensor], firsts: list[int]) -> torch.Tensor:
    """The digests of tensors of one dtype of at most 4 bytes on one device (their
    ``bits``; ``firsts[k]``: the index of tensor k's first element), ``[n, 2]``.

    Each tensor is laid out as whole rows of ``_ROW`` elements, its last row
    padded with zeros (a zero adds nothing to either sum), and the rows are
    summed in blocks of at most ``_CHUNK`` elements (``_row_sums``). With row
    ``r`` of tensor k holding the elements ``first_k + _ROW * (r - start_k) +
    c``, per row ``s1_r = sum_c b`` and ``q_r = sum_c c * b`` give the tensor's

        s1 = sum_r s1_r
        s2 = (first_k - _ROW * start_k) * s1 + _ROW * sum_r r * s1_r + sum_r q_r

    the sums over a tensor's rows being differences of prefix sums over all
    rows. Every operation is int64 arithmetic, which wraps modulo 2**64 as the
    digest does."""
    device = bits[0].device
    zeros = bits[0].new_zeros(_ROW)
    weights = _row_weights(device)
    blocks: list[torch.Tensor] = []  # float64 [2, rows] per block of rows
    pending: list[torch.Tensor] = []
    size = 0
    ends: list[int] = []  # each tensor's end, in rows
    step = max(_ROW, _CHUNK // _ROW * _ROW)  # whole rows
    for b in bits:
        n = b.numel()
        pad = -n % _ROW
        ends.append((ends[-1] if ends else 0) + (n + pad) // _ROW)
        for start in range(0, n, step):
            piece = [b[start : start + step]]
            if pad and start + step >= n:
                piece.append(zeros[:pad])  # in the block of the row it ends
            length = sum(p.numel() for p in piece)
            if pending and size + length > step:
                blocks.append(_row_sums(pending, weights))
                pending, size = [], 0
            pending += piece
            size += length
    if pending:
        blocks.append(_row_sums(pending, weights))
    if not blocks:  # every tensor empty
        return torch.zeros((len(bits), 2), dtype=torch.int64, device=device)
    rows = torch.cat(blocks, 1) if len(blocks) > 1 else blocks[0]
    sums = rows.to(torch.int64)  # exact: integers below 2**51
    position = torch.arange(sums.shape[1], dtype=torch.int64, device=device)
    # [3, rows]: the prefix sums run along the last, contiguous dimension. Along
    # the first dimension of a [rows, 3] tensor PyTorch's scan took 251 ms for a
    # 1.5B model's 1.5 M rows on an H200, 95% of the call.
    per_row = torch.cat([sums, (position * sums[0])[None]])
    # prefix[:, j]: the sums of rows before row j; one copy from the host carries
    # every tensor's bounds and its coefficient of s1.
    prefix = torch.nn.functional.pad(torch.cumsum(per_row, 1), (1, 0))
    starts = [0, *ends[:-1]]
    host = ends + starts + [_int64(f - _ROW * s) for f, s in zip(firsts, starts)]
    k = len(bits)
    host_t = _to_device(torch.tensor(host, dtype=torch.int64), device)
    per_tensor = prefix[:, host_t[: 2 * k]]
    s1, q, rs1 = per_tensor[:, :k] - per_tensor[:, k:]
    s2 = host_t[2 * k :] * s1 + _ROW * rs1 + q
    return torch.stack([s1, s2], 1)


def _to_device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``t`` (on the host) copied to ``device`` without waiting there: PyTorch's
    default copy synchronises the device's stream after it, which in a training
    step would stall the host at every digest call until the queued work ran."""
    return t.to(device, non_blocking=True)


def _row_sums(pieces: list[torch.Tensor], weights: torch.Tensor) -> torch.Tensor:
    """``[2, rows]`` float64: per row of the concatenated ``pieces`` (integers of
    at most 4 bytes, whole rows of ``_ROW``), ``sum(b)`` and ``sum(c * b)`` with
    ``c`` the column.

    One float64 matrix product by (ones, column): a single read of the block,
    in three kernels. It is exact: each product and partial sum is an integer
    below 2**51 (``|b| < 2**31``, ``c < 2**10``, ``2**10`` terms), which float64
    holds exactly in any order of summation (float64 products are never TF32)."""
    block = torch.cat(pieces) if len(pieces) > 1 else pieces[0]
    return weights @ block.view(-1, _ROW).to(torch.float64).t()


def _row_weights(device: torch.device) -> torch.Tensor:
    weights = _ROW_WEIGHTS.get(device)
    if weights is None:
        column = torch.arange(_ROW, dtype=torch.float64, device=device)
        weights = torch.stack([torch.ones_like(column), column])
        _ROW_WEIGHTS[device] = weights
    return weights


def sums_of_squares(tensors: list[torch.Tensor]) -> torch.Tensor:
    """``[n]`` float64: each tensor's sum of squares. A magnitude for people ("by
    how much"), never compared. On the CPU in float64, one pass per tensor; on an
    accelerator with PyTorch's multi-tensor norm (a few launches for all of
    them), accumulated in float32 where a tensor is no wider, as
    ``clip_grad_norm_`` does: one read, no copy."""
    if not tensors:
        return torch.zeros(0, dtype=torch.float64)
    xs = [t.detach() for t in tensors]
    if _on_cpu(xs[0].device):
        # One float64 copy alive at a time (a model's gradients at once would
        # double its memory), and one pass over it: no squares kept.
        return torch.stack([_dot_self(x.double().reshape(-1)) for x in xs])
    wide = [x.dtype == torch.float64 for x in xs]
    if all(wide) or not any(wide):
        dtype = torch.float64 if wide[0] else torch.float32
        return torch.stack(_norms(xs, dtype)).double().square()
    return torch.cat([sums_of_squares([x]) for x in xs])  # mixed widths: rare


def _dot_self(flat: torch.Tensor) -> torch.Tensor:
    return torch.dot(flat, flat)


def _norms(xs: list[torch.Tensor], dtype: torch.dtype) -> list[torch.Tensor]:
    try:
        return list(torch._foreach_norm(xs, 2, dtype=dtype))
    except (TypeError, RuntimeError):  # a PyTorch without its dtype argument
        return [torch.linalg.vector_norm(x, dtype=dtype) for x in xs]
