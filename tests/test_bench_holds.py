"""The holds bench's verdicts (bench/bench_holds.py): a run that held, one that fell, one the
collapse check stopped, and one the no-signal pause stopped at a plateau, told apart."""

from bench.bench_holds import verdict


def test_a_run_that_keeps_its_level_holds_and_one_that_falls_to_zero_does_not():
    climbed = [0.2, 0.4, 0.6] + [0.5] * 97
    assert verdict(climbed, 100, "run r completed at step 100/100")["kind"] == "holds"
    fell = [0.2, 0.5, 0.6] + [0.0] * 97
    v = verdict(fell, 100, "run r completed at step 100/100")
    assert (v["kind"], v["best"], v["best_step"], v["fell_at"]) == ("FALLS", 0.6, 3, 6)


def test_a_collapse_stop_falls_even_when_its_last_steps_average_high_enough():
    rewards = [0.2, 0.8, 0.8, 0.8, 0.8, 0.8, 0.8, 0.8, 0.1, 0.1, 0.1]
    ended = "run r stopped at step 11/100 (health check: collapsed at step 9 (best 0.8 at step 2))"
    assert verdict(rewards, 100, ended)["kind"] == "FALLS"
    assert verdict(rewards, 100, ended)["last10"] >= 0.4  # the plain rule alone would hold


def test_a_no_signal_stop_is_a_plateau_judged_over_the_steps_it_ran():
    rewards = [0.3, 0.6, 0.8] + [0.75] * 41
    ended = (
        "run r stopped at step 44/100 (health check: no learning signal: 91% of the last "
        "32 groups had equal rewards below the best seen (1))"
    )
    v = verdict(rewards, 100, ended)
    assert (v["kind"], v["holds"]) == ("plateau", True)
    low = verdict([0.3, 0.9] + [0.25] * 20, 100, ended)
    assert (low["kind"], low["holds"]) == ("plateau", False)
    # The same rewards over the full length are simply a hold.
    assert verdict(rewards, 44, "run r completed at step 44/44")["kind"] == "holds"
