"""Every private verl method cleaner wraps or overrides exists in the installed verl with the parameters cleaner
expects; a verl upgrade that changes one fails here, and at trainer start-up, with a message naming it."""

from __future__ import annotations

import pytest

from cleaner.verl import private_api, trainer_metrics
from cleaner.verl.private_api import PRIVATE_METHODS, PrivateMethod, VerlApiMismatch, require_verl_api


def test_the_installed_verl_has_every_hooked_method():
    assert private_api.verl_api_problems() == []
    require_verl_api()


@pytest.mark.parametrize("method", PRIVATE_METHODS, ids=lambda m: m.qualname)
def test_each_hooked_method_resolves_to_a_callable(method):
    assert callable(private_api._resolve(method))


def test_the_registry_names_every_method_cleaner_wraps_or_overrides():
    from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop

    from cleaner.verl.agent_loop import CleanerToolAgentLoop

    overridden = {
        f"ToolAgentLoop.{name}"
        for name in vars(CleanerToolAgentLoop)
        if name.startswith("_") and not name.startswith("__") and callable(vars(ToolAgentLoop).get(name))
    }
    assert "ToolAgentLoop._call_tool" in overridden
    assert overridden <= {method.qualname for method in PRIVATE_METHODS}


def test_a_changed_signature_is_named_with_its_user(monkeypatch):
    renamed = PrivateMethod(
        "verl.trainer.ppo.ray_trainer", "RayPPOTrainer._validate", ("self", "merge"), "trainer_metrics"
    )
    gone = PrivateMethod("verl.trainer.ppo.ray_trainer", "RayPPOTrainer._validate_v2", ("self",), "trainer_metrics")
    monkeypatch.setattr(private_api, "PRIVATE_METHODS", (renamed, gone))
    with pytest.raises(VerlApiMismatch) as raised:
        trainer_metrics.install()
    message = str(raised.value)
    assert "built against verl 0.9.1" in message
    assert "RayPPOTrainer._validate (used by cleaner.verl.trainer_metrics) takes ('self', 'merged')" in message
    assert "RayPPOTrainer._validate_v2 (used by cleaner.verl.trainer_metrics) is missing" in message


def test_installed_wrappers_keep_verls_signature():
    from verl.trainer.ppo import ray_trainer

    trainer_metrics.install()
    assert ray_trainer.RayPPOTrainer._validate.__cleaner_saar_metrics__
    assert private_api.verl_api_problems() == []


def test_the_dapo_filter_wrapper_is_listed_with_the_attributes_it_reads():
    from cleaner.verl import group_statistics

    [dapo] = [method for method in PRIVATE_METHODS if method.qualname.endswith(group_statistics.DAPO_CLASSIFIER)]
    assert dapo.parameters == group_statistics.DAPO_CLASSIFIER_PARAMETERS and dapo.used_by == "group_statistics"
    assert {"_dapo_classification_cache", "finished_keys", "partitions"} <= set(dapo.attributes)
    assert private_api.unassigned_attributes(dapo) == []


def test_an_attribute_verl_no_longer_assigns_is_named(monkeypatch):
    import dataclasses

    [dapo] = [method for method in PRIVATE_METHODS if method.attributes]
    renamed = dataclasses.replace(dapo, attributes=(*dapo.attributes, "_dapo_cache"))
    monkeypatch.setattr(private_api, "PRIVATE_METHODS", (renamed,))
    with pytest.raises(VerlApiMismatch, match=r"reads \['_dapo_cache'\], which .*ReplayBuffer.__init__ no longer"):
        require_verl_api()


def test_a_batch_field_the_roc_stand_in_lacks_is_named(monkeypatch):
    """RoC hands verl's legacy `_balance_batch` a stand-in with the kept rows' attention masks and uids: a verl
    whose balancing reads more of the batch is refused at start, naming what it reads."""
    import dataclasses

    [balance] = [method for method in PRIVATE_METHODS if method.batch_reads]
    assert balance.qualname == "RayPPOTrainer._balance_batch" and balance.used_by == "purification"
    assert private_api.unexpected_batch_reads(balance, private_api._resolve(balance)) == []
    narrower = dataclasses.replace(balance, batch_reads=("reorder",))
    monkeypatch.setattr(private_api, "PRIVATE_METHODS", (narrower,))
    [problem] = private_api.verl_api_problems()
    assert "reads ['batch[attention_mask]', 'non_tensor_batch', 'non_tensor_batch[uid]'] of its batch" in problem
