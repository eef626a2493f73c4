"""Published RFC 6962 / RFC 9162 Merkle test vectors.

Source: the test data of Google's certificate-transparency C++ log (merkle_tree_test.cc), carried
into Trillian and then transparency-dev/merkle: ``rfc6962/rfc6962_test.go`` (the hasher),
``testonly/constants.go`` (the eight leaf inputs, every complete subtree hash and every root), and
``proof/verify_test.go`` before the golden JSON files replaced its tables (the reference
inclusion and consistency proofs, and the degenerate cases). Leaf numbers in the Go tables are
1-based; they are written here as the 0-based indices RFC 9162 uses.
"""

from __future__ import annotations

import pytest

from conclave.platform.transparency import (
    EMPTY_ROOT,
    AppendFrontier,
    InMemoryHashSource,
    MalformedInput,
    OutOfRange,
    RootMismatch,
    TransparencyError,
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    node_hash,
    tree_root,
    verify_consistency,
    verify_inclusion,
)
from conclave.platform.transparency.subtrees import Subtree

LEAF_INPUTS = [
    bytes.fromhex(text)
    for text in [
        "",
        "00",
        "10",
        "2021",
        "3031",
        "40414243",
        "5051525354555657",
        "606162636465666768696a6b6c6d6e6f",
    ]
]

# NodeHashes(): every complete subtree of the eight leaves, level by level.
NODE_HASHES = [
    [
        "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
        "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
        "0298d122906dcfc10892cb53a73992fc5b9f493ea4c9badb27b791b4127a7fe7",
        "07506a85fd9dd2f120eb694f86011e5bb4662e5c415a62917033d4a9624487e7",
        "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
        "4271a26be0d8a84f0bd54c8c302e7cb3a3b5d1fa6780a40bcce2873477dab658",
        "b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f",
        "46f6ffadd3d06a09ff3c5860d2755c8b9819db7df44251788c7d8e3180de8eb1",
    ],
    [
        "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
        "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
        "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
        "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
    ],
    [
        "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
    ],
    ["5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328"],
]

# RootHashes(): the root of the first n leaves, n = 0..8.
ROOTS = [
    bytes.fromhex(text)
    for text in [
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
        "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
        "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
        "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
        "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
        "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
        "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
    ]
]

# inclusionProofs: (leaf index, tree size, proof).
INCLUSION_PROOFS = [
    (0, 1, []),
    (
        0,
        8,
        [
            "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
        ],
    ),
    (
        5,
        8,
        [
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ],
    ),
    (2, 3, ["fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"]),
    (
        1,
        5,
        [
            "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
        ],
    ),
]

# consistencyProofs: (old size, new size, proof).
CONSISTENCY_PROOFS = [
    (1, 1, []),
    (
        1,
        8,
        [
            "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
        ],
    ),
    (
        6,
        8,
        [
            "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ],
    ),
    (
        2,
        5,
        [
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
        ],
    ),
    (
        6,
        7,
        [
            "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
            "b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ],
    ),
]

# sha256SomeHash and sha256EmptyTreeHash of verify_test.go.
SOME_HASH = bytes.fromhex("abacaba000000000000000000000000000000000000000000060061e00123456")


@pytest.fixture(scope="module")
def tree() -> InMemoryHashSource:
    return InMemoryHashSource.of_entries(LEAF_INPUTS)


def test_the_hasher_matches_rfc6962_test_go() -> None:
    assert EMPTY_ROOT.hex() == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    # The empty leaf is not the empty tree.
    assert leaf_hash(b"").hex() == (
        "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d"
    )
    assert leaf_hash(b"L123456").hex() == (
        "395aa064aa4c29f7010acfe3f25db9485bbd4b91897b6ad7ad547639252b4d56"
    )
    assert node_hash(b"N123", b"N456").hex() == (
        "aa217fe888e47007fa15edab33c2b492a722cb106c64667fc2b044444de66bbb"
    )


def test_every_stored_subtree_is_the_published_node_hash(tree: InMemoryHashSource) -> None:
    for level, hashes in enumerate(NODE_HASHES):
        subtrees = [Subtree(level, index) for index in range(len(hashes))]
        assert [h.hex() for h in tree.subtree_hashes(subtrees)] == hashes


def test_the_root_of_every_prefix_is_the_published_root(tree: InMemoryHashSource) -> None:
    for size, root in enumerate(ROOTS):
        assert tree_root(tree, size) == root
    # The frontier of a writer agrees, whether it folded the leaves one by one or all at once.
    frontier = AppendFrontier()
    for size, entry in enumerate(LEAF_INPUTS, start=1):
        frontier = frontier.append([leaf_hash(entry)]).frontier
        assert frontier.root() == ROOTS[size]


@pytest.mark.parametrize(("index", "size", "proof"), INCLUSION_PROOFS)
def test_inclusion_proofs_are_the_published_ones(
    tree: InMemoryHashSource, index: int, size: int, proof: list[str]
) -> None:
    assert [h.hex() for h in inclusion_proof(tree, index, size)] == proof
    expected = [bytes.fromhex(h) for h in proof]
    verify_inclusion(leaf_hash(LEAF_INPUTS[index]), index, size, expected, ROOTS[size])


@pytest.mark.parametrize(("old", "new", "proof"), CONSISTENCY_PROOFS)
def test_consistency_proofs_are_the_published_ones(
    tree: InMemoryHashSource, old: int, new: int, proof: list[str]
) -> None:
    assert [h.hex() for h in consistency_proof(tree, old, new)] == proof
    verify_consistency(old, new, ROOTS[old], ROOTS[new], [bytes.fromhex(h) for h in proof])


@pytest.mark.parametrize(("index", "size"), [(0, 0), (0, 1), (1, 0), (2, 1)])
def test_degenerate_inclusion_probes_fail(index: int, size: int) -> None:
    # TestVerifyInclusionSingleEntry's probes: an empty root or leaf, or an unrelated one, never
    # verifies with an empty proof.
    for leaf, root in [(SOME_HASH, b""), (b"", EMPTY_ROOT), (SOME_HASH, EMPTY_ROOT)]:
        with pytest.raises(TransparencyError):
            verify_inclusion(leaf, index, size, [], root)


def test_a_single_leaf_tree_proves_its_leaf_with_an_empty_proof() -> None:
    leaf = leaf_hash(b"only")
    verify_inclusion(leaf, 0, 1, [], leaf)
    with pytest.raises(RootMismatch):
        verify_inclusion(leaf, 0, 1, [], SOME_HASH)


# TestVerifyConsistency's table: (old size, new size, old root, new root, proof, holds).
_DONT_CARE_1 = SOME_HASH
_DONT_CARE_2 = bytes(32)
CONSISTENCY_CASES = [
    (0, 0, _DONT_CARE_1, _DONT_CARE_2, [], False),
    (1, 1, _DONT_CARE_1, _DONT_CARE_2, [], False),
    # Equal sizes and roots with an empty proof hold...
    (1, 1, _DONT_CARE_2, _DONT_CARE_2, [], True),
    # ...but never from the empty tree, which RFC 9162 gives no proof from.
    (0, 0, _DONT_CARE_1, _DONT_CARE_1, [], False),
    (0, 1, _DONT_CARE_1, _DONT_CARE_2, [], False),
    # Time travel to the past.
    (1, 0, _DONT_CARE_1, _DONT_CARE_2, [], False),
    (2, 1, _DONT_CARE_1, _DONT_CARE_2, [], False),
    # An empty proof between different sizes.
    (1, 2, _DONT_CARE_1, _DONT_CARE_2, [], False),
    # Roots that differ for equal sizes.
    (0, 0, EMPTY_ROOT, _DONT_CARE_2, [], False),
    (1, 1, EMPTY_ROOT, _DONT_CARE_2, [], False),
    # Roots that match but a proof that is not empty.
    (0, 0, EMPTY_ROOT, EMPTY_ROOT, [EMPTY_ROOT], False),
    (0, 1, EMPTY_ROOT, EMPTY_ROOT, [EMPTY_ROOT], False),
    (1, 1, EMPTY_ROOT, EMPTY_ROOT, [EMPTY_ROOT], False),
]


@pytest.mark.parametrize(
    ("old", "new", "old_root", "new_root", "proof", "holds"), CONSISTENCY_CASES
)
def test_the_degenerate_consistency_cases_are_decided_as_published(
    old: int, new: int, old_root: bytes, new_root: bytes, proof: list[bytes], holds: bool
) -> None:
    if holds:
        verify_consistency(old, new, old_root, new_root, proof)
    else:
        with pytest.raises(TransparencyError):
            verify_consistency(old, new, old_root, new_root, proof)


def test_the_empty_tree_and_backwards_sizes_are_out_of_range_not_mismatches() -> None:
    with pytest.raises(OutOfRange):
        verify_consistency(0, 5, EMPTY_ROOT, ROOTS[5], [])
    with pytest.raises(OutOfRange):
        verify_consistency(5, 4, ROOTS[5], ROOTS[4], [])
    with pytest.raises(OutOfRange):
        verify_inclusion(SOME_HASH, 0, 0, [], EMPTY_ROOT)


def test_a_hash_that_is_not_32_bytes_is_malformed_even_where_the_go_code_compares_it() -> None:
    # transparency-dev's "sizes are equal (one) and proof is empty" probe accepts two equal
    # 12-byte "roots"; here a root is a SHA-256 hash or malformed input.
    with pytest.raises(MalformedInput):
        verify_consistency(1, 1, b"don't care 2", b"don't care 2", [])
