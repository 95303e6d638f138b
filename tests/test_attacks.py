"""Golden values for every attack on 2-4 tiny records, arithmetic worked by hand in the comments.

Style of tensorflow/privacy's advanced_mia_test.py: inputs small enough that the expected score can be
checked on paper. Every score is float64 [N], higher = more likely member, NaN for a record with no tokens.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from attacks import AttackInputs, run_attack

A = np.array
nan = float("nan")


def fresh_inputs() -> AttackInputs:
    """Record A: two trajectories; B: one empty + one of 3 tokens; C: only empty trajectories; D: none.

    A traj0: target [-1.0, -2.0]; refs [[-1.5, -1.0], [-3.0, -2.5]]; base [-1.25, -2.5]
             max ref [-1.5, -1.0] -> gap [0.5, -1.0];  mean ref [-2.25, -1.75] -> gap [1.25, -0.25]
             base gap [0.25, 0.5]
    A traj1: target [-0.5]; refs [[-1.0], [-0.75]]; base [-1.5]
             max ref -0.75 -> gap 0.25;  mean ref -0.875 -> gap 0.375;  base gap 1.0
    B traj0: empty.  B traj1: target [-2.0, -1.0, -3.0]; refs [[-1, -1, -1], [-2, -3, -2]]; base [-2, -2, -2]
             max ref [-1, -1, -1] -> gap [-1, 0, -2];  mean ref [-1.5, -2, -1.5] -> gap [-0.5, 1.0, -1.5]
             base gap [0, 1, -1]
    """
    e1, e2 = np.zeros(0), np.zeros((2, 0))
    return AttackInputs(
        record_ids=["A", "B", "C", "D"],
        fresh_target=[[A([-1.0, -2.0]), A([-0.5])], [e1, A([-2.0, -1.0, -3.0])], [e1, e1], []],
        fresh_refs=[[A([[-1.5, -1.0], [-3.0, -2.5]]), A([[-1.0], [-0.75]])],
                    [e2, A([[-1.0, -1.0, -1.0], [-2.0, -3.0, -2.0]])], [e2, e2], []],
        fresh_base=[[A([-1.25, -2.5]), A([-1.5])], [e1, A([-2.0, -2.0, -2.0])], [e1, e1], []],
    )


@pytest.mark.parametrize("name, params, expected", [
    # leaky, slope 0.1, mean over tokens, max over refs:
    #   A: traj0 LeakyReLU([0.5, -1.0]) = [0.5, -0.1] -> 0.2; traj1 0.25 -> (0.2 + 0.25) / 2 = 0.225
    #   B: the empty trajectory is skipped (not a 0): [-0.1, 0, -0.2] -> -0.1  (a 0 would give -0.05)
    ("leaky", None, [0.225, -0.1, nan, nan]),
    # slope 0: A traj0 [0.5, 0] -> 0.25, traj1 0.25 -> 0.25;  B [0, 0, 0] -> 0
    ("leaky", {"slope": 0.0}, [0.25, 0.0, nan, nan]),
    # topk 0.5 keeps max(1, floor(0.5 T)) tokens: A traj0 T=2 -> 1: 0.5; traj1 T=1 -> 1: 0.25 -> 0.375
    #   B T=3 -> 1: the highest of [-0.1, 0, -0.2] = 0 -> 0
    ("leaky", {"token_aggregation": "topk", "topk_fraction": 0.5}, [0.375, 0.0, nan, nan]),
    # mean over refs, slope 0.1: A traj0 [1.25, -0.025] -> 0.6125; traj1 0.375 -> 0.49375
    #   B [-0.05, 1.0, -0.15] -> 0.8 / 3
    ("leaky", {"reference_reduction": "mean"}, [0.49375, 0.8 / 3, nan, nan]),
    # first token only: A traj0 0.5, traj1 0.25 -> 0.375;  B gap -1 -> -0.1
    ("leaky", {"max_tokens": 1}, [0.375, -0.1, nan, nan]),
    # fresh_loss: A (mean(-1, -2) + -0.5) / 2 = (-1.5 - 0.5) / 2 = -1.0;  B mean(-2, -1, -3) = -2
    ("fresh_loss", None, [-1.0, -2.0, nan, nan]),
    ("fresh_loss", {"max_tokens": 1}, [(-1.0 - 0.5) / 2, -2.0, nan, nan]),
    # fresh_gap_max: A (mean(0.5, -1.0) + 0.25) / 2 = (-0.25 + 0.25) / 2 = 0;  B mean(-1, 0, -2) = -1
    ("fresh_gap_max", None, [0.0, -1.0, nan, nan]),
    # fresh_gap_mean: A (mean(1.25, -0.25) + 0.375) / 2 = (0.5 + 0.375) / 2 = 0.4375;  B mean(-0.5, 1, -1.5) = -1/3
    ("fresh_gap_mean", None, [0.4375, -1.0 / 3, nan, nan]),
    # fresh_gap_base: A (mean(0.25, 0.5) + 1.0) / 2 = (0.375 + 1) / 2 = 0.6875;  B mean(0, 1, -1) = 0
    ("fresh_gap_base", None, [0.6875, 0.0, nan, nan]),
])
def test_fresh_golden(name, params, expected):
    scores = run_attack(name, fresh_inputs(), params)
    assert scores.dtype == np.float64 and scores.shape == (4,)
    np.testing.assert_allclose(scores, expected, rtol=0, atol=1e-12)


def fixed_inputs() -> AttackInputs:
    """Record P (4 tokens, text 'abc'), Q (2 tokens, text 'ab'), E (no tokens, text '').

    P: target [-1, -2, -3, -2]  (mean -2, sum -8);  base [-2, -3, -3, -2] (mean -2.5)
       mu [-1.5, -1, -2, -2], sigma [0.5, 2, 1, 0] -> z = [1.0, -0.5, -1.0, 0 (sigma 0)]
       refs (in, out, in, out): [-1,-2,-1,-2] mean -1.5; [-3]*4 mean -3; [-2,-3,-2,-3] mean -2.5; [-2]*4 mean -2
       IN {-1.5, -2.5}: mean -2, std 0.5;  OUT {-3, -2}: mean -2.5, std 0.5
    Q: target [-0.5, -1.5]  (mean -1, sum -2);  base [-0.5, -0.5] (mean -0.5)
       mu [-1, -1], sigma [1, 0.5] -> z = [0.5, -1.0]
       refs (in, out, in, out): [-0.5,-0.5] -0.5; [-1.5,-1.5] -1.5; [-1,-0.5] -0.75; [-2,-1.5] -1.75
       IN {-0.5, -0.75}: mean -0.625, std 0.125;  OUT {-1.5, -1.75}: mean -1.625, std 0.125
    zlib lengths: 'abc' -> 2 header + 5 deflate (3 + 3*8 + 7 = 34 bits, fixed Huffman) + 4 adler32 = 11 bytes;
                  'ab' -> 2 + 4 (3 + 16 + 7 = 26 bits) + 4 = 10 bytes.
    Population (RMIA): target [-1.5, -1.95, -1.5]; the four reference students (fixed_refs rows 0-3 of every
    record = population_refs columns 0-3) all give [-1.0, -2.0, -2.0], so pr(z) is that value whichever of
    them a record uses (test_rmia_population_prior_uses_the_records_own_models varies them).
    """
    e = np.zeros(0)
    ref_in = A([True, False, True, False])
    return AttackInputs(
        record_ids=["P", "Q", "E"],
        texts=["abc", "ab", ""],
        fixed_target=[A([-1.0, -2.0, -3.0, -2.0]), A([-0.5, -1.5]), e],
        fixed_target_mu=[A([-1.5, -1.0, -2.0, -2.0]), A([-1.0, -1.0]), e],
        fixed_target_sigma=[A([0.5, 2.0, 1.0, 0.0]), A([1.0, 0.5]), e],
        fixed_base=[A([-2.0, -3.0, -3.0, -2.0]), A([-0.5, -0.5]), e],
        fixed_refs=[A([[-1.0, -2.0, -1.0, -2.0], [-3.0] * 4, [-2.0, -3.0, -2.0, -3.0], [-2.0] * 4]),
                    A([[-0.5, -0.5], [-1.5, -1.5], [-1.0, -0.5], [-2.0, -1.5]]),
                    np.zeros((4, 0))],
        fixed_ref_in=[ref_in, ref_in, ref_in],
        fixed_ref_cols=[A([0, 1, 2, 3])] * 3,
        population_target=A([-1.5, -1.95, -1.5]),
        population_refs=A([[-1.0] * 4, [-2.0] * 4, [-2.0] * 4]),
    )


# Global variances for LiRA (np.std of every record's IN / OUT statistics pooled; E has none):
#   IN  {-1.5, -2.5, -0.5, -0.75}: mean -1.3125, squared deviations .03515625 + 1.41015625 + .66015625
#       + .31640625 = 2.421875, / 4 -> var_in = 0.60546875
#   OUT {-3, -2, -1.5, -1.75}: mean -2.0625, squared deviations .87890625 + .00390625 + .31640625 + .09765625
#       = 1.296875, / 4 -> var_out = 0.32421875
VAR_IN, VAR_OUT = 0.60546875, 0.32421875


def _log_normal_ratio(s, mu_in, var_in, mu_out, var_out):
    """log N(s; mu_in, var_in) - log N(s; mu_out, var_out), written out by hand."""
    return (-0.5 * math.log(var_in) - (s - mu_in) ** 2 / (2 * var_in)
            + 0.5 * math.log(var_out) + (s - mu_out) ** 2 / (2 * var_out))


@pytest.mark.parametrize("name, params, expected", [
    # loss: P mean -2;  Q mean -1
    ("loss", None, [-2.0, -1.0, nan]),
    # zlib: mean log p / zlib bytes: P -2 / 11;  Q -1 / 10  (the sum would give -8 / 11 and -2 / 10)
    ("zlib", None, [-2.0 / 11, -0.1, nan]),
    # min_k, k 0.2: P T=4 -> max(1, floor(0.8)) = 1 lowest: -3;  Q T=2 -> 1: -1.5
    ("min_k", None, [-3.0, -1.5, nan]),
    # min_k, k 0.5: P 2 lowest (-3, -2) -> -2.5;  Q 1 lowest -1.5
    ("min_k", {"k": 0.5}, [-2.5, -1.5, nan]),
    # min_k, k 1: the mean, i.e. loss
    ("min_k", {"k": 1.0}, [-2.0, -1.0, nan]),
    # min_k_plus_plus, k 0.2: P lowest z -1.0;  Q lowest z -1.0
    ("min_k_plus_plus", None, [-1.0, -1.0, nan]),
    # k 0.5: P 2 lowest of [1, -0.5, -1, 0] -> (-1 - 0.5) / 2 = -0.75;  Q 1 lowest -> -1.0
    # k 1.0: P (1 - 0.5 - 1 + 0) / 4 = -0.125;  Q (0.5 - 1) / 2 = -0.25
    ("min_k_plus_plus", {"k": 0.5}, [-0.75, -1.0, nan]),
    ("min_k_plus_plus", {"k": 1.0}, [-0.125, -0.25, nan]),
    # ref_ratio_base: P -2 - (-2.5) = 0.5;  Q -1 - (-0.5) = -0.5
    ("ref_ratio_base", None, [0.5, -0.5, nan]),
    # ref_ratio_refs: P -2 - mean(-3, -2) = 0.5;  Q -1 - mean(-1.5, -1.75) = 0.625
    ("ref_ratio_refs", None, [0.5, 0.625, nan]),
    # lira_online, per-record variance: P z_in = 0, z_out = (-2 + 2.5) / 0.5 = 1, equal stds -> 0.5 * 1^2 = 0.5
    #   Q z_in = (-1 + 0.625) / 0.125 = -3, z_out = (-1 + 1.625) / 0.125 = 5 -> (25 - 9) / 2 = 8
    ("lira_online", {"global_variance": False}, [0.5, 8.0, nan]),
    # lira_online, global variance:  P: s -2, mu_in -2, mu_out -2.5;  Q: s -1, mu_in -0.625, mu_out -1.625
    ("lira_online", None, [_log_normal_ratio(-2, -2, VAR_IN, -2.5, VAR_OUT),
                           _log_normal_ratio(-1, -0.625, VAR_IN, -1.625, VAR_OUT), nan]),
    # lira_offline, per record: -ln Pr[Z > z_out] = -ln(1 - Phi(z)); Phi(1) = 0.841344746 -> -ln 0.158655254
    #   = 1.841021645;  Phi(5): 1 - Phi(5) = 2.866515719e-7 -> 15.064998394
    ("lira_offline", {"global_variance": False}, [1.8410216450, 15.0649983940, nan]),
    # lira_offline, global: P z = 0.5 / sqrt(0.32421875) = 0.878114..., Q z = 0.625 / 0.569402 = 1.097643...
    ("lira_offline", None, [-math.log(0.5 * math.erfc(0.5 / math.sqrt(VAR_OUT) / math.sqrt(2))),
                            -math.log(0.5 * math.erfc(0.625 / math.sqrt(VAR_OUT) / math.sqrt(2))), nan]),
])
def test_fixed_golden(name, params, expected):
    scores = run_attack(name, fixed_inputs(), params)
    assert scores.dtype == np.float64 and scores.shape == (3,)
    np.testing.assert_allclose(scores, expected, rtol=0, atol=1e-9)


# RMIA. Population log-ratios log(pr(z|target) / pr(z)):
#   online (pr(z) = balanced mean over the record's refs, all equal here): z1 -1.5 + 1 = -0.5,
#             z2 -1.95 + 2 = 0.05, z3 -1.5 + 2 = 0.5
#   P online: pr(x) = (mean(e^-1.5, e^-2.5) + mean(e^-3, e^-2)) / 2
#             = (0.223130 + 0.082085 + 0.049787 + 0.135335) / 4 = 0.122584 -> ln = -2.098955
#             log-ratio -2 + 2.098955 = 0.098955 > -0.5, > 0.05, < 0.5 -> 2/3
#   Q online: (0.606531 + 0.472367 + 0.223130 + 0.173774) / 4 = 0.368950 -> ln = -0.997085
#             log-ratio -1 + 0.997085 = -0.002915 > -0.5 only -> 1/3
#   gamma 1.2 (ln 0.182322): P beats z with 0.098955 - lr_z > 0.182: z1 only -> 1/3;  Q: z1 (0.497) -> 1/3
#   offline a = 0: pr = 1/2 everywhere -> log-ratio = mean log p + ln 2: x: P -1.307, Q -0.307;
#             z: -0.807, -1.257, -0.807 -> P beats none (0), Q beats all (1)
#   offline a = 1: pr = pr_OUT: P ln((e^-3 + e^-2) / 2) = ln 0.092561 = -2.379921 -> 0.379921 beats z1, z2: 2/3
#             Q ln((e^-1.5 + e^-1.75) / 2) = ln 0.198452 = -1.617226 -> 0.617226 beats all: 1
#   offline a = 0.3 (the default, what an audit's rmia_offline runs): pr = (1.3 pr_OUT + 0.7) / 2
#             P (1.3 * 0.092561 + 0.7) / 2 = 0.410165, ln -0.891196 -> log-ratio -2 + 0.891196 = -1.108804
#             Q (1.3 * 0.198452 + 0.7) / 2 = 0.478994, ln -0.736067 -> log-ratio -0.263933
#             z1 (1.3 e^-1 + 0.7) / 2 = 0.589122, ln -0.529123 -> -1.5 + 0.529123 = -0.970877
#             z2, z3 (1.3 e^-2 + 0.7) / 2 = 0.437968, ln -0.825610 -> -1.124390 and -0.674390
#             P beats z2 only: 1/3;  Q beats all three: 1
@pytest.mark.parametrize("params, expected", [
    (None, [2 / 3, 1 / 3, nan]),
    ({"gamma": 1.2}, [1 / 3, 1 / 3, nan]),
    ({"offline": True, "a": 0.0}, [0.0, 1.0, nan]),
    ({"offline": True, "a": 1.0}, [2 / 3, 1.0, nan]),
    ({"offline": True}, [1 / 3, 1.0, nan]),
])
def test_rmia_golden(params, expected):
    np.testing.assert_allclose(run_attack("rmia", fixed_inputs(), params), expected, rtol=0, atol=1e-12)


def test_rmia_offline_a_half_matches_hand_formula():
    # a = 0.5: pr(x) = (1.5 * pr_OUT(x) + 0.5) / 2.  P: (1.5 * 0.092561 + 0.5) / 2 = 0.319421, ln -1.141246,
    # log-ratio -0.858754;  Q: (1.5 * 0.198452 + 0.5) / 2 = 0.398839, ln -0.919197, log-ratio -0.080803.
    # z: (1.5 e^-1 + 0.5) / 2 = 0.525910 -> -1.5 + 0.642682 = -0.857318;  (1.5 e^-2 + 0.5) / 2 = 0.351501
    #   -> -1.95 + 1.045546 = -0.904454 and -1.5 + 1.045546 = -0.454454.
    # P beats z2 only (-0.8588 < -0.8573 = z1): 1/3;  Q beats all three: 1.
    np.testing.assert_allclose(run_attack("rmia", fixed_inputs(), {"offline": True, "a": 0.5}), [1 / 3, 1.0, nan])


def rmia_matched_inputs() -> AttackInputs:
    """Four reference students m0..m3 (population_refs columns 0..3); m0 and m1 give every text 1 nat less than
    m2 and m3 (a per-model offset). Each record is scored by two of them, as a matched-reference plan does:
        X: rows (m0 IN, m1 OUT), cols [0, 1];  Y: rows (m2 IN, m3 OUT), cols [2, 3];
        W: rows (m3 OUT, m0 IN), cols [3, 0]  (rows in another order than columns: the mapping is used)
    Mean log-probs of each record's text:  X target -2.0, m0 -2.5, m1 -3.0;  Y target -1.1, m2 -0.8, m3 -1.2;
        W target -1.25, m3 -1.0, m0 -2.0.
    Population:        m0    m1    m2    m3   target
                 z1  -2.0  -2.0  -1.0  -1.0   -1.2
                 z2  -3.0  -3.0  -2.0  -2.0   -2.4
                 z3  -1.5  -1.5  -0.5  -0.5   -0.8
                 z4  -2.5  -2.5  -1.5  -1.5   -1.6
    """
    return AttackInputs(
        record_ids=["X", "Y", "W"],
        fixed_target=[A([-1.5, -2.5]), A([-1.0, -1.2]), A([-1.25, -1.25])],
        fixed_refs=[A([[-2.0, -3.0], [-3.0, -3.0]]), A([[-0.8, -0.8], [-1.0, -1.4]]),
                    A([[-1.0, -1.0], [-2.0, -2.0]])],
        fixed_ref_in=[A([True, False]), A([True, False]), A([False, True])],
        fixed_ref_cols=[A([0, 1]), A([2, 3]), A([3, 0])],
        population_target=A([-1.2, -2.4, -0.8, -1.6]),
        population_refs=A([[-2.0, -2.0, -1.0, -1.0], [-3.0, -3.0, -2.0, -2.0],
                           [-1.5, -1.5, -0.5, -0.5], [-2.5, -2.5, -1.5, -1.5]]),
    )


# pr(z) from the record's own models (log-ratios lr = log pr(.|target) - log pr(.)):
#   online, balanced over IN and OUT models:
#     X (m0, m1, equal on z): lr_z = target - m0 = [0.8, 0.6, 0.7, 0.9];
#       pr(x) = (e^-2.5 + e^-3) / 2 = (0.0820850 + 0.0497871) / 2 = 0.0659361, ln -2.719077 -> lr_x 0.719077
#       beats z2, z3 -> 2/4
#     Y (m2, m3): lr_z = target - m2 = [-0.2, -0.4, -0.3, -0.1];
#       pr(y) = (e^-0.8 + e^-1.2) / 2 = (0.449329 + 0.301194) / 2 = 0.375261, ln -0.980132 -> lr_y -0.119868
#       beats z1, z2, z3 -> 3/4
#     W (m0 IN, m3 OUT; m3 = m0 + 1 on z): pr(z) = e^m0 (1 + e) / 2 -> ln = m0 + ln 1.859141 = m0 + 0.620115
#       lr_z = target - m0 - 0.620115 = [0.179885, -0.020115, 0.079885, 0.279885];
#       pr(w) = (e^-2 + e^-1) / 2 -> ln = -2 + 0.620115 -> lr_w = -1.25 + 1.379885 = 0.129885
#       beats z2, z3 -> 2/4
#   offline a = 1 (pr = mean over OUT models):
#     X (m1): lr_z = [0.8, 0.6, 0.7, 0.9]; lr_x = -2.0 + 3.0 = 1.0 -> beats all -> 1
#     Y (m3): lr_z = [-0.2, -0.4, -0.3, -0.1]; lr_y = -1.1 + 1.2 = 0.1 -> beats all -> 1
#     W (m3 only, not m0): lr_z = [-0.2, -0.4, -0.3, -0.1]; lr_w = -1.25 + 1.0 = -0.25 -> beats z2, z3 -> 2/4
#   offline a = 0.3 (the default; pr = (1.3 pr_OUT + 0.7) / 2 of the record's OUT model on both sides):
#     X (m1): pr(x) = (1.3 e^-3 + 0.7) / 2 = 0.382362, ln -0.961389 -> lr_x = -2.0 + 0.961389 = -1.038611
#       z under m1 [-2, -3, -1.5, -2.5]: pr = 0.437968, 0.382362, 0.495035, 0.403355
#       -> lr_z = [-1.2 + 0.825610, -2.4 + 0.961389, -0.8 + 0.703127, -1.6 + 0.907938]
#              = [-0.374390, -1.438611, -0.096873, -0.692062] -> beats z2 only -> 1/4
#     Y (m3): pr(y) = (1.3 e^-1.2 + 0.7) / 2 = 0.545776, ln -0.605546 -> lr_y = -1.1 + 0.605546 = -0.494454
#       z under m3 [-1, -2, -0.5, -1.5]: lr_z = [-1.2 + 0.529123, -2.4 + 0.825610, -0.8 + 0.295385, -1.6 + 0.703127]
#              = [-0.670877, -1.574390, -0.504615, -0.896873] -> beats all (z3 by 0.010) -> 1
#     W (m3): pr(w) = (1.3 e^-1 + 0.7) / 2 -> lr_w = -1.25 + 0.529123 = -0.720877; Y's lr_z -> beats z2, z4 -> 2/4
# The old code normalised z by every student: pr(z) = mean over m0..m3 = e^m0 (1 + e) / 2, lr_z = W's row
# [0.179885, -0.020115, 0.079885, 0.279885] for every record: online X 4/4, Y 0/4 (lr_y -0.119868 beats none),
# W 2/4; offline a = 1: X 4/4, Y 2/4, W 0/4. The score then follows which students scored the record (X's
# low-offset pair wins everything, Y's high pair nothing), not membership.
@pytest.mark.parametrize("params, expected", [
    (None, [0.5, 0.75, 0.5]),
    ({"offline": True, "a": 1.0}, [1.0, 1.0, 0.5]),
    ({"offline": True}, [0.25, 1.0, 0.5]),
])
def test_rmia_population_prior_uses_the_records_own_models(params, expected):
    np.testing.assert_allclose(run_attack("rmia", rmia_matched_inputs(), params), expected, rtol=0, atol=1e-12)


def test_rmia_population_prior_follows_fixed_ref_cols_not_row_order():
    # Relabelling the students (permuting population_refs' columns and fixed_ref_cols alike) changes nothing;
    # pointing X at m2/m3's columns instead (cols [2, 3]) gives X Y's population row: online lr_z
    # [-0.2, -0.4, -0.3, -0.1] -> lr_x 0.719077 beats all -> 1.
    x = rmia_matched_inputs()
    perm = np.array([2, 0, 3, 1])                       # new column j holds old column perm[j]
    inv = np.argsort(perm)                              # old column c is now column inv[c]
    y = rmia_matched_inputs()
    y.population_refs = x.population_refs[:, perm]
    y.fixed_ref_cols = [inv[c] for c in x.fixed_ref_cols]
    np.testing.assert_array_equal(run_attack("rmia", y), run_attack("rmia", x))
    x.fixed_ref_cols[0] = A([2, 3])
    np.testing.assert_allclose(run_attack("rmia", x), [1.0, 0.75, 0.5], rtol=0, atol=1e-12)


def test_blind_text_separable_toy():
    # Members say 'alpha common', non-members 'beta common'; 2 stratified folds of 1 member + 1 non-member.
    # Whichever fold holds a record out, its training fold has one 'alpha' member and one 'beta' non-member;
    # 'common' is in both classes (weight 0 by symmetry), so the held-out member gets w_alpha > 0 -> P > 0.5
    # and the non-member w_beta = -w_alpha -> P < 0.5, symmetric around 0.5.
    # (With fillers 'one'/'two' split across folds, the filler weights cancel 'alpha' and P = 0.5 exactly.)
    x = AttackInputs(record_ids=list("abcd"), texts=["alpha common", "alpha common", "beta common", "beta common"],
                     labels=A([1, 1, 0, 0]))
    scores = run_attack("blind_text", x, {"n_splits": 2, "ngram_max": 1})
    assert scores.dtype == np.float64 and scores.shape == (4,)
    assert (scores[:2] > 0.5).all() and (scores[2:] < 0.5).all()
    np.testing.assert_allclose(scores[:2] + scores[2:], 1.0, atol=1e-9)


def test_zlib_empty_text_still_nan_not_division():
    # E has no tokens: NaN even though zlib('') is 8 bytes (a mean over no tokens is no evidence, not 0).
    assert np.isnan(run_attack("zlib", fixed_inputs())[2])


def test_trajectories_of_one_record_may_differ_in_length_and_weigh_equally():
    # One record, trajectories of 1 and 3 tokens: fresh_loss = (mean([-3]) + mean([-1, -1, -1])) / 2 = -2,
    # not the token-weighted (-3 - 3) / 4 = -1.5.
    x = AttackInputs(record_ids=["r"], fresh_target=[[A([-3.0]), A([-1.0, -1.0, -1.0])]])
    assert run_attack("fresh_loss", x)[0] == -2.0


def test_float32_inputs_scored_in_float64():
    # Signals are stored as float32; scores come back float64 and equal the float64 computation.
    x = fixed_inputs()
    x32 = AttackInputs(record_ids=x.record_ids, fixed_target=[t.astype(np.float32) for t in x.fixed_target])
    np.testing.assert_allclose(run_attack("loss", x32), [-2.0, -1.0, nan])
