"""Pipeline-parallel serving under mpirun (tiletrain.inference.serving.generate_pipeline):
on 2 and 3 ranks, with 1 and 2 request streams, every rank gets the greedy tokens of one
process token for token and the same tokens sampled with a fixed seed -- plain, with top-k,
top-p and an eos id that ends some rows, and speculative with a 1-layer draft on rank 0
(greedy: plain greedy's tokens; sampled, one stream: generate's) -- (GPT and Llama, tiny
random float64 models), each layer's weights and key/value cache live on its stage's rank,
a layout that does not fit is rejected on every rank, and `tiletrain generate --dist
pipeline` (also with --top-p, --eos and --draft) prints the one-process text.  Each launch
has a timeout (mpi_launch.py)."""
import numpy as np
import pytest

from fault_timing import assert_quick_exit
from mpi_launch import requires_mpi, run_mpi, run_single

pytestmark = [requires_mpi, pytest.mark.mpi]


def _load(path):
    with np.load(path) as d:
        return {k: d[k] for k in d.files}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """Per model and stream count, one process (one stage): the greedy tokens of the cached
    generate (generate_pipeline's equal them) and generate_pipeline's tokens sampled with a
    fixed seed."""
    out = tmp_path_factory.mktemp("serve")
    ref = {}
    for kind in ("gpt", "llama"):
        for streams in (1, 2):
            run_single("serve_generate.py", out, f"single-{kind}-{streams}", kind, streams)
            o = _load(out / f"single-{kind}-{streams}-rank0.npz")
            assert o["ref"].shape == (4, 13) and int(o["stages"]) == 1
            np.testing.assert_array_equal(o["got"], o["ref"])
            assert not np.array_equal(o["sampled"], o["ref"])  # it really sampled
            np.testing.assert_array_equal(o["filtered"], o["filtered_ref"])
            eos = int(o["eos"][0])  # ends row 0 early, not every row
            assert o["filtered"][0, -1] == eos and not all(eos in row[5:] for row in o["filtered"])
            np.testing.assert_array_equal(o["spec"], o["ref"])
            assert 0 in o["accepted"] and o["accepted"].max() >= 1  # the draft is rejected and accepted
            np.testing.assert_array_equal(o["spec_sampled"], o["spec_sampled_ref"])
            assert not np.array_equal(o["spec_sampled"], o["ref"])
            ref[kind, streams] = o
    return ref


# each model on 2 and 3 ranks and with 1 and 2 streams, each rank count with both streams and both
# models (a pairwise cover of the 8 combinations)
@pytest.mark.parametrize("kind, nprocs, streams", [("gpt", 2, 1), ("gpt", 3, 2), ("llama", 2, 2), ("llama", 3, 1)])
def test_pipeline_serving_equals_one_process(tmp_path, reference, kind, nprocs, streams):
    tag = f"{kind}-{nprocs}-{streams}"
    run_mpi("serve_generate.py", nprocs, tmp_path, tag, kind, streams, timeout=60 * nprocs)
    for r in range(nprocs):
        o = _load(tmp_path / f"{tag}-rank{r}.npz")
        want = reference[kind, streams]
        np.testing.assert_array_equal(o["got"], want["ref"], err_msg=f"{tag} rank {r}")
        np.testing.assert_array_equal(o["sampled"], want["sampled"], err_msg=f"{tag} rank {r} sampled")
        np.testing.assert_array_equal(o["filtered"], want["filtered"], err_msg=f"{tag} rank {r} top-k/top-p/eos")
        np.testing.assert_array_equal(o["spec"], want["ref"], err_msg=f"{tag} rank {r} speculative greedy")
        np.testing.assert_array_equal(o["accepted"], want["accepted"], err_msg=f"{tag} rank {r} accepted")
        np.testing.assert_array_equal(o["spec_sampled"], want["spec_sampled"], err_msg=f"{tag} rank {r} spec sampled")
        assert (int(o["stages"]), int(o["streams"])) == (nprocs, streams)
        # 3 layers: the first on rank 0, the last on the last rank, weights and cache alike
        assert (int(o["owner_first"]), int(o["cache_first"])) == (0, 0), (tag, r)
        assert (int(o["owner_last"]), int(o["cache_last"])) == (nprocs - 1, nprocs - 1), (tag, r)


def test_serving_a_model_placed_for_training(tmp_path, reference):
    """A model already placed as a pipeline, with gradients (after a backward), is served
    where it is."""
    run_mpi("serve_generate.py", 2, tmp_path, "trained", "gpt", 2, 8, "trained", timeout=90)
    for r in range(2):
        np.testing.assert_array_equal(_load(tmp_path / f"trained-rank{r}.npz")["got"], reference["gpt", 2]["ref"])


def test_more_ranks_than_layers_is_rejected_on_every_rank(tmp_path):
    res = run_mpi("serve_generate.py", 4, tmp_path, "bad", "gpt", 1, timeout=90, check=False)
    assert_quick_exit(res.stdout)
    assert res.returncode != 0
    assert "--dist pipeline: 4 stages (one per rank) but the model has only 3 layers" in res.stdout, res.stdout


def test_cli_generate_dist_pipeline_prints_the_single_process_text(tmp_path):
    """`tiletrain generate --dist pipeline --streams 2` on 2 ranks: rank 0 prints the greedy
    text of `tiletrain generate` in one process, once per sequence, and a tokens/s line."""
    from tiletrain.testing.tiny_hf import tiny_gpt2_folder
    folder = tiny_gpt2_folder(tmp_path / "hf", vocab_size=256, n_positions=48, n_layer=2, n_head=2, n_embd=32,
                              seed=5)
    args = ["generate", "--model", folder, "--prompt", "tile", "--tokens", 12, "--temperature", 0, "--ncpu", 1]
    single = run_single("serve_cli.py", *args).stdout  # the text, and the tokens/s line (stderr)
    want = "\n".join(line for line in single.strip().splitlines() if "tokens/s" not in line)
    assert want.startswith("tile") and len(want) > len("tile") and "12 tokens in " in single, single
    got = run_mpi("serve_cli.py", 2, *args, "--dist", "pipeline", "--streams", 2, timeout=90).stdout
    assert f"--- sample 1 of 2 ---\n{want}\n--- sample 2 of 2 ---\n{want}\n" in got, got
    assert "24 tokens in " in got, got
    assert got.count("tokens/s") == 1 and "(2 stream(s), 2 stage(s), batch 2)" in got, got  # rank 0 only


def test_cli_generate_dist_pipeline_top_p_eos_draft(tmp_path):
    """`tiletrain generate --dist pipeline --streams 2` on 2 ranks with --top-p and --eos
    prints the samples of one process (row b sampled from the b-th stream of the seed, each
    cut at its first eos), and with --draft the greedy text (60 tokens: past the context of
    48, the sliding window)."""
    from tiletrain.testing.tiny_hf import tiny_gpt2_folder
    folder = tiny_gpt2_folder(tmp_path / "hf", vocab_size=256, n_positions=48, n_layer=2, n_head=2, n_embd=32,
                              seed=5)
    draft = tiny_gpt2_folder(tmp_path / "draft", vocab_size=256, n_positions=48, n_layer=1, n_head=2, n_embd=16,
                             seed=6)
    base = ["generate", "--model", folder, "--prompt", "tile", "--tokens", 12, "--ncpu", 1, "--batch", 3]
    for opts in (["--temperature", 1.0, "--top-k", 20, "--top-p", 0.95, "--seed", 2, "--eos", 122, 67],
                 ["--temperature", 0, "--draft", draft, "--num-draft-tokens", 3, "--tokens", 60]):
        single = run_single("serve_cli.py", *base, *opts).stdout  # the samples, then the summary (stderr)
        want = "\n".join(line for line in single.split("\n") if "tokens/s" not in line
                         and "speculative decoding" not in line).rstrip("\n")
        assert want.count("--- sample ") == 3, single
        got = run_mpi("serve_cli.py", 2, *base, *opts, "--dist", "pipeline", "--streams", 2, timeout=120).stdout
        assert want + "\n" in got, (single, got)
        assert got.count("tokens/s") == 1 and "(2 stream(s), 2 stage(s), batch 3)" in got, got
        assert ("speculative decoding: " in got) == ("--draft" in opts), got
