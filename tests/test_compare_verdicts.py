"""docs/headline/compare_verdicts.py lines up two committed plan outputs without recomputing."""

from tests.helpers import REPO, load_script

V2 = REPO / "docs" / "headline" / "v2"


def _module():
    return load_script(REPO / "docs" / "headline" / "compare_verdicts.py")


def test_same_verdicts_read_as_same_and_a_changed_one_as_differs():
    module = _module()
    text = (V2 / "symbol_half_plan_output.md").read_text(encoding="utf-8")
    claims, contrasts = module.parse(text)
    assert len(claims) == 10  # 5 claims x 2 measures
    assert claims[("5 causal-correlational gap", "kl_target_unweighted")] == {
        "LSTM": "not resolved", "Transformer": "reproduced"}
    assert contrasts[("C1", "kl_target_unweighted", "LSTM")] == (
        "-0.157", "[-0.207, -0.107]", "not reproduced")
    table = module.render((claims, contrasts), module.parse(text), ["a", "b"])
    assert "differs" not in table and table.count("| same |") > 10
    changed = text.replace(
        "| 4 causal decrease | D0, D1, D2, D3 (all) | kl_target | reproduced | reproduced |",
        "| 4 causal decrease | D0, D1, D2, D3 (all) | kl_target | reproduced | not resolved |")
    assert changed != text
    table = module.render((claims, contrasts), module.parse(changed), ["a", "b"])
    assert table.count("**differs between weightings**") == 1


def test_a_file_without_a_verdict_table_is_refused(tmp_path, capsys):
    module = _module()
    other = tmp_path / "x.md"
    other.write_text("# not a plan output\n", encoding="utf-8")
    assert module.main([str(V2 / "symbol_half_plan_output.md"), str(other)]) == 2
    assert "no '## verdict' table" in capsys.readouterr().err


def test_a_claim_table_with_one_model_column_is_read_by_its_header():
    # version 3's D3 output trains the transformer only: its claim table has one model column,
    # which must be read as the transformer's (a positional read gave it to the LSTM)
    text = (REPO / "docs" / "headline" / "v3" / "d3_plan_output.md").read_text(encoding="utf-8")
    claims, _ = _module().parse(text)
    assert claims == {
        ("4' causal decrease from 500 to 1000 (transformer, state q1)", measure): {
            "Transformer": verdict}
        for measure, verdict in (("kl_target_unweighted", "reproduced"),
                                 ("kl_target", "not resolved"))}
