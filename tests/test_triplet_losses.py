"""Triplet losses against a NumPy reference that enumerates every triplet, and mining across replicas."""
import itertools
import json
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from helpers import run_python
from triplet import losses

MARGIN = 0.2
# Repeated labels, and labels 2, 4 and 5 held by one image: anchors with no positive.
LABELS = np.array([0, 0, 0, 1, 1, 2, 3, 3, 3, 3, 4, 5])


def reference_distances(embeddings, squared):
  n = len(embeddings)
  d = np.zeros((n, n))
  for i, j in itertools.product(range(n), range(n)):
    d[i, j] = np.sum((embeddings[i] - embeddings[j]) ** 2)
  return d if squared else np.sqrt(d)


def reference_triplets(labels):
  """Every (a, p, n) with a != p, labels[a] == labels[p] != labels[n]."""
  n = len(labels)
  return [(a, p, q) for a, p, q in itertools.product(range(n), range(n), range(n))
          if a != p and labels[a] == labels[p] and labels[q] != labels[a]]


def reference_batch_hard(labels, embeddings, margin, squared, soft=False):
  """soft: Hermans et al.'s soft margin, log(1 + exp(d(a,p) - d(a,n))), which has no margin."""
  margin = 0.0 if soft else margin
  d = reference_distances(embeddings, squared)
  hardest = {}  # anchor -> (gap, d(a,p), d(a,n)) of its hardest triplet
  for a, p, q in reference_triplets(labels):
    hardest_p = max(d[a, p], hardest.get(a, (0, -np.inf, 0))[1])
    hardest_n = min(d[a, q], hardest.get(a, (0, 0, np.inf))[2])
    hardest[a] = (hardest_p - hardest_n + margin, hardest_p, hardest_n)
  if not hardest:
    return 0.0, {}
  gaps = np.array([v[0] for v in hardest.values()])
  per_anchor = np.log1p(np.exp(gaps)) if soft else np.maximum(gaps, 0.0)
  return per_anchor.mean(), {
      "active_fraction": np.mean(gaps > 0),
      "positive_distance": np.mean([v[1] for v in hardest.values()]),
      "negative_distance": np.mean([v[2] for v in hardest.values()]),
  }


def reference_semi_hard(labels, embeddings, margin, squared):
  """Returns (loss, stats, number of pairs that fell back to the farthest negative)."""
  d = reference_distances(embeddings, squared)
  negatives = {}  # (a, p) -> distances d(a, n) of every negative n
  for a, p, q in reference_triplets(labels):
    negatives.setdefault((a, p), []).append(d[a, q])
  rows, fallbacks = [], 0
  for (a, p), candidates in negatives.items():
    farther = [x for x in candidates if x > d[a, p]]
    fallbacks += not farther
    chosen = min(farther) if farther else max(candidates)
    rows.append((d[a, p] - chosen + margin, d[a, p], chosen))
  if not rows:
    return 0.0, {}, 0
  rows = np.array(rows)
  return np.maximum(rows[:, 0], 0).mean(), {
      "active_fraction": np.mean(rows[:, 0] > 0),
      "positive_distance": rows[:, 1].mean(),
      "negative_distance": rows[:, 2].mean(),
  }, fallbacks


def reference_batch_all(labels, embeddings, margin, squared):
  d = reference_distances(embeddings, squared)
  rows = np.array([(d[a, p] - d[a, q] + margin, d[a, p], d[a, q])
                   for a, p, q in reference_triplets(labels)]).reshape(-1, 3)
  if not len(rows):
    return 0.0, {}
  active = rows[:, 0] > 0
  loss = rows[active, 0].mean() if active.any() else 0.0
  return loss, {
      "active_fraction": active.mean(),
      "positive_distance": rows[:, 1].mean(),
      "negative_distance": rows[:, 2].mean(),
  }


def random_embeddings(seed, n=len(LABELS), dim=3):
  # Unit vectors in few dimensions: distances straddle the margin.
  x = np.random.default_rng(seed).normal(size=(n, dim))
  return x / np.linalg.norm(x, axis=1, keepdims=True)


def assert_matches(result, expected_loss, expected_stats):
  loss, stats = result
  assert loss.shape == ()
  assert loss.dtype == tf.float32
  np.testing.assert_allclose(float(loss), expected_loss, rtol=1e-4, atol=1e-5)
  for key, value in expected_stats.items():
    np.testing.assert_allclose(float(stats[key]), value, rtol=1e-4, atol=1e-5, err_msg=key)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("squared", [False, True])
@pytest.mark.parametrize("soft", [False, True])
def test_batch_hard_matches_reference(seed, squared, soft):
  x = random_embeddings(seed)
  expected = reference_batch_hard(LABELS, x, MARGIN, squared, soft)
  assert_matches(
      losses.batch_hard_triplet_loss(LABELS, x, MARGIN, squared=squared, soft=soft), *expected)


@pytest.mark.parametrize("squared", [False, True])
def test_semi_hard_matches_reference_with_and_without_semi_hard_negatives(squared):
  total_fallbacks = 0
  for seed in range(4):
    x = random_embeddings(seed)
    loss, stats, fallbacks = reference_semi_hard(LABELS, x, MARGIN, squared)
    total_fallbacks += fallbacks
    assert_matches(
        losses.batch_semi_hard_triplet_loss(LABELS, x, MARGIN, squared=squared), loss, stats)
  # The cases exercised both branches: pairs with and without a farther negative.
  assert 0 < total_fallbacks < 4 * sum(np.sum(LABELS == l) * (np.sum(LABELS == l) - 1)
                                       for l in set(LABELS))


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("squared", [False, True])
def test_batch_all_matches_reference(seed, squared):
  x = random_embeddings(seed)
  expected = reference_batch_all(LABELS, x, MARGIN, squared)
  assert_matches(losses.batch_all_triplet_loss(LABELS, x, MARGIN, squared=squared), *expected)


def test_semi_hard_all_pairs_fall_back_to_farthest_negative():
  # Each class sits on opposite ends of one axis: every negative is closer than the positive.
  x = np.array([[5.0, 0.0], [-5.0, 0.0], [0.0, 5.0], [0.0, -5.0]])
  labels = np.array([0, 0, 1, 1])
  loss, stats, fallbacks = reference_semi_hard(labels, x, 1.0, False)
  assert fallbacks == 4
  np.testing.assert_allclose(loss, 10.0 - np.sqrt(50.0) + 1.0)
  assert_matches(losses.batch_semi_hard_triplet_loss(labels, x, 1.0), loss, stats)


@pytest.mark.parametrize("loss_fn", list(losses.LOSSES.values()), ids=list(losses.LOSSES))
@pytest.mark.parametrize("labels", [[0, 0, 0, 0], [0, 1, 2, 3]], ids=["no_negative", "no_positive"])
def test_loss_is_zero_without_any_valid_triplet(loss_fn, labels):
  loss, stats = loss_fn(np.array(labels), random_embeddings(0, n=4), MARGIN, False)
  assert float(loss) == 0.0
  assert all(np.isfinite(float(v)) for v in stats.values())


def test_batch_all_is_zero_when_no_triplet_is_active():
  x = np.array([[0.0], [0.0], [5.0], [5.0]])
  loss, stats = losses.batch_all_triplet_loss(np.array([0, 0, 1, 1]), x, MARGIN)
  assert float(loss) == 0.0
  assert float(stats["active_fraction"]) == 0.0
  np.testing.assert_allclose(float(stats["negative_distance"]), 5.0)


def reference_loss(name, labels, x, squared):
  if name == "batch_hard":
    return reference_batch_hard(labels, x, MARGIN, squared)[0]
  if name == "batch_hard_soft":
    return reference_batch_hard(labels, x, MARGIN, squared, soft=True)[0]
  if name == "semi_hard":
    return reference_semi_hard(labels, x, MARGIN, squared)[0]
  return reference_batch_all(labels, x, MARGIN, squared)[0]


@pytest.mark.parametrize("name", list(losses.LOSSES))
@pytest.mark.parametrize("squared", [False, True])
def test_gradient_matches_finite_differences(name, squared):
  x = random_embeddings(7)
  x_tf = tf.Variable(x, dtype=tf.float32)
  with tf.GradientTape() as tape:
    loss, _ = losses.LOSSES[name](LABELS, x_tf, MARGIN, squared)
  gradient = tape.gradient(loss, x_tf).numpy()
  numeric = np.zeros_like(x)
  step = 1e-5
  for index in np.ndindex(*x.shape):
    shift = np.zeros_like(x)
    shift[index] = step
    numeric[index] = (reference_loss(name, LABELS, x + shift, squared)
                      - reference_loss(name, LABELS, x - shift, squared)) / (2 * step)
  np.testing.assert_allclose(gradient, numeric, atol=2e-3)
  assert np.abs(numeric).max() > 1e-2  # The comparison is not between two zeros.


@pytest.mark.parametrize("name", list(losses.LOSSES))
@pytest.mark.parametrize("squared", [False, True])
def test_gradients_finite_when_embeddings_coincide(name, squared):
  x = random_embeddings(3, n=6)
  x[1] = x[0]  # Same identity, same point.
  x[4] = x[2]  # Different identities, same point.
  x_tf = tf.Variable(x, dtype=tf.float32)
  with tf.GradientTape() as tape:
    loss, stats = losses.LOSSES[name](np.array([0, 0, 1, 1, 2, 2]), x_tf, MARGIN, squared)
  gradient = tape.gradient(loss, x_tf)
  assert np.isfinite(float(loss))
  assert np.all(np.isfinite(gradient.numpy()))
  assert all(np.isfinite(float(v)) for v in stats.values())


def test_pairwise_distances_are_exact_on_coinciding_rows():
  x = np.array([[0.3, 0.4], [0.3, 0.4], [0.0, 0.0]], np.float32)
  d = losses.pairwise_distances(x).numpy()
  np.testing.assert_allclose(d, [[0, 0, 0.5], [0, 0, 0.5], [0.5, 0.5, 0]], atol=1e-6)
  np.testing.assert_allclose(losses.pairwise_distances(x, squared=True).numpy(), d ** 2, atol=1e-6)


def test_losses_accept_float16_embeddings_and_compile():
  x = tf.constant(random_embeddings(1), tf.float16)
  compiled = tf.function(losses.batch_semi_hard_triplet_loss, jit_compile=False)
  loss, _ = compiled(tf.constant(LABELS), x, MARGIN)
  assert loss.dtype == tf.float32
  expected = reference_semi_hard(LABELS, x.numpy().astype(np.float64), MARGIN, False)[0]
  np.testing.assert_allclose(float(loss), expected, rtol=1e-3, atol=1e-4)


# Two replicas need two logical CPUs, configured before TensorFlow initializes: a fresh process.
# Every loss, both distances: the replicas' loss (each replica's value) and gradient (each
# replica's loss / 2, summed, the training loop's convention) against one device on the
# concatenated batch, and against each replica mining only its own half.
CROSS_REPLICA_SCRIPT = textwrap.dedent("""
    import json
    import sys
    import numpy as np
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    from triplet import losses

    labels, inputs, weights, margin = json.loads(sys.argv[1])
    labels = tf.constant(labels, tf.int32)
    inputs = tf.constant(inputs, tf.float32)
    half = len(inputs) // 2
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    with strategy.scope():
      w = tf.Variable(weights, dtype=tf.float32)

    def embed(x):
      return tf.math.l2_normalize(tf.matmul(x, w), axis=1)

    parts = strategy.experimental_distribute_values_from_function(
        lambda context: (inputs[context.replica_id_in_sync_group * half:][:half],
                         labels[context.replica_id_in_sync_group * half:][:half]))
    cases = {f"{name} squared={squared}": (loss, squared)
             for name, loss in losses.LOSSES.items() for squared in (False, True)}

    @tf.function  # one trace for every case: tracing for two replicas dominates the time
    def replica(x, y):
      context = tf.distribute.get_replica_context()
      out = {}
      for key, (loss, squared) in cases.items():
        with tf.GradientTape() as tape:
          value, _ = loss(*losses.gather_replicas(y, embed(x)), margin, squared)
          scaled = value / context.num_replicas_in_sync
        out[key] = value, context.all_reduce(tf.distribute.ReduceOp.SUM, tape.gradient(scaled, w))
      return out

    per_replica = strategy.run(replica, args=parts)
    results = {}
    for key, (loss, squared) in cases.items():
      with tf.GradientTape() as tape:
        expected, _ = loss(labels, embed(inputs), margin, squared)
      values, gradients = per_replica[key]
      local = [float(loss(labels[i:i + half], embed(inputs[i:i + half]), margin, squared)[0])
               for i in (0, half)]
      results[key] = {
          "expected": float(expected), "expected_gradient": tape.gradient(expected, w).numpy().tolist(),
          "values": [float(v) for v in strategy.experimental_local_results(values)],
          "gradients": [g.numpy().tolist() for g in strategy.experimental_local_results(gradients)],
          "local": float(np.mean(local))}
    print("RESULT", json.dumps(results))
""")


@pytest.mark.slow
def test_cross_replica_mining_matches_one_device_on_the_concatenated_batch():
  rng = np.random.default_rng(0)
  # Every identity has images on both replicas: positives and negatives cross the split.
  labels = [0, 1, 2, 3, 0, 1, 2, 4, 0, 1, 3, 5, 2, 3, 4, 5]
  inputs = rng.normal(size=(len(labels), 6))
  weights = rng.normal(size=(6, 3))
  result = run_python(["-c", CROSS_REPLICA_SCRIPT,
                       json.dumps([labels, inputs.tolist(), weights.tolist(), MARGIN])], timeout=300)
  lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
  assert lines, result.stderr[-3000:]
  results = json.loads(lines[0][len("RESULT "):])
  assert len(results) == 2 * len(losses.LOSSES)
  for key, r in results.items():
    for value, gradient in zip(r["values"], r["gradients"]):
      np.testing.assert_allclose(value, r["expected"], rtol=1e-5, err_msg=key)
      np.testing.assert_allclose(gradient, r["expected_gradient"], rtol=1e-5, atol=1e-7, err_msg=key)
    assert np.abs(r["expected_gradient"]).max() > 1e-2, key  # not a comparison of zeros
    assert abs(r["local"] - r["expected"]) > 1e-3, key  # mining within each half is another loss
