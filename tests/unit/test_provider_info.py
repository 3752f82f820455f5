"""Provider registration: entry point, connection types and their forms."""

from __future__ import annotations

from importlib.metadata import entry_points

from airflow_training_provider.get_provider_info import get_provider_info
from airflow_training_provider.hooks.training import TensorOneHook, TogetherHook
from airflow_training_provider.platforms import PLATFORMS


def test_entry_point_resolves_to_provider_info():
    (ep,) = [
        e
        for e in entry_points(group="apache_airflow_provider")
        if e.value.startswith("airflow_training_provider")
    ]
    assert ep.load() is get_provider_info


def test_connection_types_and_forms():
    types = {c["connection-type"]: c for c in get_provider_info()["connection-types"]}
    # every platform registers its connection type but AWS's, which belongs to the Amazon provider
    assert set(types) == {p.conn_type for p in PLATFORMS.values()} - {"aws"}
    pai = types["pai"]
    assert pai["ui-field-behaviour"]["hidden-fields"] == ["schema", "port"]
    assert pai["ui-field-behaviour"]["relabeling"]["login"] == "AccessKey ID"
    assert set(pai["conn-fields"]) == {"security_token", "region", "workspace_id"}
    for conn_type, hook in (("tensorone", TensorOneHook), ("together", TogetherHook)):
        form = types[conn_type]["ui-field-behaviour"]
        assert form["hidden-fields"] == ["schema", "login", "port"]
        assert form["relabeling"]["password"] == "API key"
        assert types[conn_type]["hook-class-name"].endswith(hook.__name__)
        assert hook.conn_type == conn_type
        assert hook.get_ui_field_behaviour()["hidden_fields"] == form["hidden-fields"]
