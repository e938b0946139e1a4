"""Building BFCL's services, classifying their functions and invoking calls."""

from __future__ import annotations

import collections

import pytest

from examples.bfcl_replay.dataset import Task, parse_call
from examples.bfcl_replay.errors import (
    CallArgumentError,
    DatasetError,
    ToolCallError,
    UnknownFunctionError,
)
from examples.bfcl_replay.jsontypes import JsonObject
from examples.bfcl_replay.services import (
    KINDS,
    SERVICE_MODULES,
    Kind,
    Services,
    kind_of,
    public_functions,
    service_class,
)
from examples.bfcl_replay.snapshot import canonical_json

# Read functions whose only effect is on a private cache no later call can observe.
READ_CACHES = {"get_flight_cost": "_flight_cost_lookup"}


def _task(involved: tuple[str, ...], config: JsonObject | None = None) -> Task:
    return Task("t", ("go",), dict(config or {}), involved, ((),))


@pytest.mark.parametrize("name", sorted(SERVICE_MODULES))
def test_every_public_function_has_a_kind(name: str) -> None:
    assert sorted(KINDS[name]) == sorted(public_functions(name))


def test_every_function_of_the_200_tasks_is_classified(bfcl_tasks: list[Task]) -> None:
    kinds = collections.Counter(
        kind_of(call.function) for task in bfcl_tasks for turn in task.calls for call in turn
    )
    assert kinds == {Kind.READ: 480, Kind.WRITE: 442, Kind.APPROVAL: 220}


@pytest.mark.parametrize(
    ("function", "kind"),
    [
        ("place_order", Kind.APPROVAL),
        ("cancel_order", Kind.APPROVAL),
        ("book_flight", Kind.APPROVAL),
        ("send_message", Kind.APPROVAL),
        ("post_tweet", Kind.APPROVAL),
        ("retweet", Kind.APPROVAL),
        ("cd", Kind.WRITE),
        ("get_current_speed", Kind.WRITE),
        ("ls", Kind.READ),
        ("get_flight_cost", Kind.READ),
    ],
)
def test_kinds_follow_the_documented_policy(function: str, kind: Kind) -> None:
    assert kind_of(function) is kind


def test_read_calls_change_no_observable_state(bfcl_tasks: list[Task]) -> None:
    checked = 0
    for task in bfcl_tasks:
        services = Services.fresh(task)
        for turn in task.calls:
            for call in turn:
                if kind_of(call.function) is not Kind.READ:
                    services.invoke(call)
                    continue
                name = services.owner(call.function)
                before = services.state(name)
                services.invoke(call)
                after = services.state(name)
                cache = READ_CACHES.get(call.function)
                if cache is not None:
                    before.pop(cache)
                    after.pop(cache)
                assert canonical_json(after) == canonical_json(before), (task.id, call.text)
                checked += 1
    assert checked == 480


def test_services_are_built_as_bfcl_builds_them(bfcl_tasks: list[Task]) -> None:
    task = next(t for t in bfcl_tasks if "TradingBot" in t.involved_classes)
    services = Services.fresh(task)
    assert list(services.instances) == list(task.involved_classes)
    bot = services.instances["TradingBot"]
    assert vars(bot)["long_context"] is False
    config = task.initial_config["TradingBot"]
    assert isinstance(config, dict)
    before = canonical_json(config)
    services.invoke(parse_call("trading_login(username='u', password='p')"))
    assert canonical_json(config) == before  # the task's config is deep-copied, never mutated


def test_a_function_of_another_service_is_unknown_and_the_error_says_where_it_lives() -> None:
    services = Services.fresh(_task(("MathAPI",)))
    with pytest.raises(UnknownFunctionError) as caught:
        services.invoke(parse_call("place_order(order_type='Buy', symbol='A', price=1, amount=1)"))
    assert caught.value.function == "place_order"
    assert str(caught.value) == (
        "unknown function 'place_order': not offered by MathAPI; "
        "it belongs to TradingBot, which this task does not involve"
    )
    with pytest.raises(UnknownFunctionError, match=r"'teleport': not offered by MathAPI$"):
        services.invoke(parse_call("teleport(to='moon')"))
    with pytest.raises(UnknownFunctionError, match="private methods cannot be called"):
        services.invoke(parse_call("_load_scenario({})"))
    with pytest.raises(UnknownFunctionError):
        kind_of("teleport")


def test_an_unknown_service_class_is_a_dataset_error() -> None:
    with pytest.raises(DatasetError, match="unknown service class 'WebSearchAPI'"):
        Services.fresh(_task(("WebSearchAPI",)))
    with pytest.raises(DatasetError):
        service_class("os")


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("cd(folder='a', recursive=True)", "cd() got an unexpected keyword argument 'recursive'"),
        ("cd()", "cd() missing a required argument: 'folder'"),
        ("cd('a', 'b')", "cd() too many positional arguments"),
    ],
)
def test_arguments_that_do_not_fit_the_signature_run_nothing(text: str, reason: str) -> None:
    services = Services.fresh(_task(("GorillaFileSystem",)))
    before = canonical_json(services.states())
    with pytest.raises(CallArgumentError) as caught:
        services.invoke(parse_call(text))
    assert caught.value.reason == reason
    assert str(caught.value) == f"bad arguments in {text!r}: {reason}"
    assert canonical_json(services.states()) == before


@pytest.mark.parametrize(
    ("text", "raised"),
    [
        ("place_order(order_type='Buy', symbol='AAPL', price='cheap', amount=5)", "TypeError"),
        ("fillFuelTank(fuelAmount='ten')", "TypeError"),
        ("cd(folder=5)", "AttributeError"),
        (
            "compute_exchange_rate(base_currency='USD', target_currency='XYZ', value=1)",
            "ValueError",
        ),
    ],
)
def test_wrong_argument_types_raise_a_clear_tool_call_error(text: str, raised: str) -> None:
    involved = ("GorillaFileSystem", "TradingBot", "TravelAPI", "VehicleControlAPI")
    services = Services.fresh(_task(involved))
    services.invoke(parse_call("trading_login(username='u', password='p')"))
    with pytest.raises(ToolCallError) as caught:
        services.invoke(parse_call(text))
    assert str(caught.value).startswith(f"{text} raised {raised}: ")
    assert type(caught.value.__cause__).__name__ == raised


def test_arguments_are_copied_so_a_call_can_be_replayed() -> None:
    services = Services.fresh(_task(("TwitterAPI",), {"TwitterAPI": {"authenticated": True}}))
    post = parse_call("post_tweet(content='hi', tags=['#a'], mentions=['@b'])")
    services.invoke(post)
    services.invoke(parse_call("mention(tweet_id=0, mentioned_usernames=['@c'])"))
    assert post.kwargs == {"content": "hi", "tags": ["#a"], "mentions": ["@b"]}


def test_the_shared_mutable_default_of_post_tweet_never_leaks() -> None:
    twitter = service_class("TwitterAPI")
    services = Services.fresh(_task(("TwitterAPI",), {"TwitterAPI": {"authenticated": True}}))
    services.invoke(parse_call("post_tweet(content='first')"))
    services.invoke(parse_call("mention(tweet_id=0, mentioned_usernames=['@leak'])"))
    second = services.invoke(parse_call("post_tweet(content='second')"))
    assert isinstance(second, dict)
    assert second["mentions"] == []
    assert getattr(twitter, "post_tweet").__defaults__ == ([], [])  # noqa: B009


def test_a_signature_is_read_once_per_function_and_checking_copies_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import copy
    import inspect

    from examples.bfcl_replay import services as module

    read: list[object] = []
    copied: list[object] = []
    signature, deepcopy = inspect.signature, copy.deepcopy
    monkeypatch.setattr(module, "_SIGNATURES", {})
    monkeypatch.setattr(inspect, "signature", lambda f: read.append(f) or signature(f))
    config = {"TwitterAPI": {"authenticated": True}}
    first, second = (Services.fresh(_task(("TwitterAPI",), config)) for _ in range(2))
    monkeypatch.setattr(copy, "deepcopy", lambda v, *a: copied.append(v) or deepcopy(v, *a))
    post = parse_call("post_tweet(content='hi', tags=['#a'])")
    for services in (first, second, first):  # two instances: one function
        services.check(post)
    assert (len(read), copied) == (1, [])
    first.invoke(post)
    assert len(read) == 1 and copied  # invoking still copies its arguments
    with pytest.raises(CallArgumentError, match="unexpected keyword"):
        second.check(parse_call("post_tweet(content='hi', colour='red')"))


def test_results_are_plain_json_even_for_mpmath_and_decimal_values() -> None:
    import decimal

    import mpmath

    services = Services.fresh(_task(("MathAPI",)))
    dps, prec = mpmath.mp.dps, decimal.getcontext().prec
    log = services.invoke(parse_call("logarithm(value=630.0, base=10, precision=5)"))
    root = services.invoke(parse_call("square_root(number=2, precision=6)"))
    assert log == {"result": "2.7993"}
    assert root == {"result": "1.41421"}
    assert (mpmath.mp.dps, decimal.getcontext().prec) == (dps, prec)


def test_the_replay_checks_a_call_text_once_and_a_bad_one_every_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from examples.bfcl_replay.replay import ReplayEnv

    env = ReplayEnv(host=None)  # type: ignore[arg-type]  # checking needs no host
    task = _task(("TwitterAPI",), {"TwitterAPI": {"authenticated": True}})
    checked: list[str] = []
    check = Services.check
    monkeypatch.setattr(Services, "check", lambda s, c: checked.append(c.text) or check(s, c))
    good = parse_call("post_tweet(content='hi')")
    bad = parse_call("post_tweet(colour='red')")
    for _ in range(3):  # a turn's step runs again after each approval
        env.check(task, good)
        with pytest.raises(CallArgumentError):
            env.check(task, bad)
    assert checked == [good.text] + [bad.text] * 3


def test_unloaded_services_check_every_call_as_loaded_ones_do() -> None:
    # Issue 25: the replay's steps check calls against services built without their
    # scenario (a loaded copy per task cost ~0.2 ms); the verdicts must not change.
    from examples.bfcl_replay.dataset import Call, categories, load_categories
    from examples.bfcl_replay.errors import CallError, CallParseError

    def verdict(services: Services, call: Call) -> str:
        try:
            return services.check(call)
        except CallError as error:
            return f"{type(error).__name__}: {error}"

    compared = 0
    for task in load_categories(list(categories())):
        loaded, unloaded = Services.fresh(task), Services.unloaded(task)
        for turn in range(len(task.call_texts)):
            try:
                calls = task.turn_calls(turn)
            except CallParseError:
                continue
            for call in calls:
                assert verdict(unloaded, call) == verdict(loaded, call), (task.id, call.text)
                compared += 1
    assert compared > 1000
    twitter = _task(("TwitterAPI",))
    for text in ("post_tweet(colour='red')", "book_flight(x=1)", "_private()"):
        call = parse_call(text)
        refused = verdict(Services.unloaded(twitter), call)
        assert refused == verdict(Services.fresh(twitter), call) and "Error: " in refused
