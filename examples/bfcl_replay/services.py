"""BFCL's simulated services: build them for a task, classify and invoke their functions.

The eight service classes of the multi-turn category live in
`bfcl_eval.eval_checker.multi_turn_eval.func_source_code`. A task names the ones it uses in
`involved_classes`; `Services.fresh` builds them as BFCL's own executor
(`execute_multi_turn_func_call`) does: `cls()`, then, except for the stateless `MathAPI`,
`_load_scenario(deepcopy(initial_config.get(name, {})), long_context=task.long_context)`, the
flag BFCL derives from the task's category (True for `long_context`; see `dataset`). Every
public method is offered from the first turn, in every category: BFCL's `miss_func` withholds
functions from the model's documentation only, never from the executor. A function name maps to
the involved class that offers it as a public method (no two of the eight classes share a public
name; if they did, the later class in `involved_classes` would win, as in BFCL).

With ``long_context=True`` a loaded instance holds references to BFCL's module-level extension
tables (`TravelAPI` puts the very dicts of `CREDIT_CARD_EXTENSION` and
`BOOKING_RECORD_EXTENSION` in its `credit_card_list` and `booking_record`): a call changing
such a card would change the table, and so every later task of the process, and a service
restored from its snapshot after a restart would not share it. `Services.fresh` therefore
deep-copies a long-context instance right after loading it (same state, own objects). The
ground truth of the 200 long-context tasks leaves every table unchanged except
`LONG_WEATHER_EXTENSION`, which `get_outside_temperature_from_google` overwrites with its draw
and returns (converted to JSON at once, under the host's lock in the replay).

Determinism. No service seeds the global `random` module: `MessageAPI`, `TradingBot`,
`TravelAPI` and `VehicleControlAPI` each own a `random.Random(initial_config.get("random_seed",
<class default>))` made in `_load_scenario` (defaults 200191, 1053520, 141053 and 141053; no
task sets a seed), so a fresh instance replays the same ids, tokens, timestamps and
temperatures; the generator's state is part of the snapshot (see `snapshot`). The long-context
extension tables are handled above. What remains, and how it is handled:

- `TwitterAPI.post_tweet` has mutable defaults (`tags=[]`, `mentions=[]`) that the stored
  tweet keeps, and `mention` extends the tweet's list in place: the shared default would leak
  mentions into later tweets of any task in the process. `invoke` passes a fresh copy of every
  omitted mutable default, and a deep copy of every argument (the parsed `Call` may be reused).
- `MathAPI.logarithm` sets the process-global `mpmath.mp.dps` and returns an `mpf`, whose text
  depends on it; `square_root` sets the (per-thread) `decimal` precision and returns a
  `Decimal`. `invoke` runs MathAPI calls under a process-wide lock, converts the result to
  JSON at once (`to_json_result`: `{'result': '2.7993'}`) and puts both precisions back.
- `TradingBot` turns a seeded draw into a timestamp with local-time `datetime.fromtimestamp`
  around a fixed naive date: the same on any machine except across a DST change that day.
- `TravelAPI.verify_traveler_information` computes an age from today's date: its answer could
  change on a traveller's 18th birthday.
- `File._last_modified` is wall-clock time; it is never read and is kept out of snapshots.

Kinds. Every public function is classified in `KINDS`, explicitly:

- `read`: never changes state another call can observe. (`TravelAPI.get_flight_cost` refreshes
  the private `_flight_cost_lookup` cache, which `book_flight` recomputes before reading.)
- `write`: changes service state, including only advancing the service's seeded generator
  (`VehicleControlAPI.get_current_speed`, `get_outside_temperature_from_google`), logging in
  or out, and moving around the file system (`cd`).
- `approval`: moves money or sends something to someone, and so needs a person's approval:
  trading orders and their cancellation, funding and withdrawing (`place_order`,
  `cancel_order`, `fund_account`, `withdraw_funds`); booking, cancelling and insuring travel
  and contacting its support (`book_flight`, `cancel_booking`, `purchase_insurance`,
  `contact_customer_support`); sending a message (`send_message`); publishing on the social
  network (`post_tweet`, `retweet`, `comment`, `mention`).

Example:
    >>> task = load_tasks()[0]
    >>> services = Services.fresh(task)
    >>> services.invoke(task.calls[0][0])
    {'current_working_directory': 'document'}
"""

from __future__ import annotations

import contextlib
import copy
import decimal
import functools
import importlib
import inspect
import threading
from collections.abc import Iterator, Mapping
from enum import StrEnum
from typing import Any

import mpmath

from .dataset import Call, Task
from .errors import CallArgumentError, DatasetError, ToolCallError, UnknownFunctionError
from .jsontypes import JsonObject, JsonValue
from .snapshot import restore, snapshot, to_json_result

_PACKAGE = "bfcl_eval.eval_checker.multi_turn_eval.func_source_code"

SERVICE_MODULES: Mapping[str, str] = {
    "GorillaFileSystem": f"{_PACKAGE}.gorilla_file_system",
    "MathAPI": f"{_PACKAGE}.math_api",
    "MessageAPI": f"{_PACKAGE}.message_api",
    "TicketAPI": f"{_PACKAGE}.ticket_api",
    "TradingBot": f"{_PACKAGE}.trading_bot",
    "TravelAPI": f"{_PACKAGE}.travel_booking",
    "TwitterAPI": f"{_PACKAGE}.posting_api",
    "VehicleControlAPI": f"{_PACKAGE}.vehicle_control",
}
"""The multi-turn service classes, by class name, and the module defining each."""

STATELESS_CLASSES: frozenset[str] = frozenset({"MathAPI"})
"""Classes BFCL builds without `_load_scenario`."""


class Kind(StrEnum):
    """What a function does to the world."""

    READ = "read"
    WRITE = "write"
    APPROVAL = "approval"


def _kinds(read: str, write: str = "", approval: str = "") -> dict[str, Kind]:
    table = {name: Kind.READ for name in read.split()}
    table.update({name: Kind.WRITE for name in write.split()})
    table.update({name: Kind.APPROVAL for name in approval.split()})
    return table


KINDS: Mapping[str, Mapping[str, Kind]] = {
    "GorillaFileSystem": _kinds(
        read="pwd ls cat find wc sort grep du tail diff",
        write="cd mkdir touch echo mv rm rmdir cp",
    ),
    "MathAPI": _kinds(
        read="absolute_value add divide imperial_si_conversion logarithm max_value mean "
        "min_value multiply percentage power round_number si_unit_conversion square_root "
        "standard_deviation subtract sum_values",
    ),
    "MessageAPI": _kinds(
        read="list_users get_user_id message_get_login_status view_messages_sent "
        "search_messages get_message_stats",
        write="message_login add_contact delete_message",
        approval="send_message",
    ),
    "TicketAPI": _kinds(
        read="get_ticket get_user_tickets ticket_get_login_status",
        write="create_ticket close_ticket resolve_ticket edit_ticket ticket_login logout",
    ),
    "TradingBot": _kinds(
        read="get_current_time get_symbol_by_name get_stock_info get_order_details "
        "get_account_info trading_get_login_status get_watchlist get_order_history "
        "get_transaction_history get_available_stocks filter_stocks_by_price "
        "notify_price_change",
        write="trading_login trading_logout add_to_watchlist remove_stock_from_watchlist",
        approval="place_order cancel_order fund_account withdraw_funds",
    ),
    "TravelAPI": _kinds(
        read="travel_get_login_status get_budget_fiscal_year get_flight_cost "
        "get_credit_card_balance retrieve_invoice get_booking_history list_all_airports "
        "compute_exchange_rate verify_traveler_information get_nearest_airport_by_city "
        "get_all_credit_cards",
        write="authenticate_travel register_credit_card set_budget_limit",
        approval="book_flight cancel_booking purchase_insurance contact_customer_support",
    ),
    "TwitterAPI": _kinds(
        read="posting_get_login_status get_tweet get_user_tweets search_tweets "
        "get_tweet_comments get_user_stats list_all_following",
        write="authenticate_twitter follow_user unfollow_user",
        approval="post_tweet retweet comment mention",
    ),
    "VehicleControlAPI": _kinds(
        read="displayCarStatus check_tire_pressure estimate_distance "
        "estimate_drive_feasibility_by_mileage liter_to_gallon gallon_to_liter "
        "get_zipcode_based_on_city find_nearest_tire_shop "
        "get_outside_temperature_from_weather_com display_log",
        write="startEngine fillFuelTank lockDoors adjustClimateControl setHeadlights "
        "activateParkingBrake pressBrakePedal releaseBrakePedal setCruiseControl "
        "set_navigation get_current_speed get_outside_temperature_from_google",
    ),
}
"""The kind of every public function, per service class."""

_OWNERS: Mapping[str, str] = {f: cls for cls, table in KINDS.items() for f in table}


def service_class(name: str) -> type:
    """Return the service class of this name, importing its module.

    Raises:
        DatasetError: The name is not one of the eight multi-turn service classes.
    """
    if name not in SERVICE_MODULES:
        raise DatasetError(f"unknown service class {name!r}; known: {', '.join(SERVICE_MODULES)}")
    cls: type = getattr(importlib.import_module(SERVICE_MODULES[name]), name)
    return cls


@functools.cache
def public_functions(name: str) -> tuple[str, ...]:
    """Return the public method names of a service class, sorted.

    Raises:
        DatasetError: The name is not one of the eight multi-turn service classes.
    """
    return tuple(
        member
        for member, _ in inspect.getmembers(service_class(name), inspect.isfunction)
        if not member.startswith("_")
    )


def kind_of(function: str) -> Kind:
    """Return whether a function reads, writes or needs approval.

    Raises:
        UnknownFunctionError: No service class offers the function.
    """
    if function not in _OWNERS:
        raise UnknownFunctionError(function, tuple(SERVICE_MODULES))
    return KINDS[_OWNERS[function]][function]


class Services:
    """The live service instances of one task, by class name.

    Args:
        instances: Service instance per class name, in the task's `involved_classes` order.
    """

    def __init__(self, instances: Mapping[str, object]) -> None:
        self.instances: dict[str, object] = dict(instances)
        self._owners: dict[str, str] = {}
        for name in self.instances:
            self._owners.update(dict.fromkeys(public_functions(name), name))

    @classmethod
    def fresh(cls, task: Task) -> Services:
        """Build a task's services from its initial config, exactly as BFCL does for its
        category (``long_context`` as BFCL derives it from the task id; see the module
        docstring).

        Raises:
            DatasetError: The task involves an unknown service class.
        """
        return cls.for_task(task, {})

    @classmethod
    def unloaded(cls, task: Task) -> Services:
        """Build a task's services without their scenario: enough to `check` calls (which
        functions are offered, and their signatures, are the classes'), never to invoke one.
        Costs nothing next to `fresh` (~0.2 ms a task: its config copied and loaded).

        Raises:
            DatasetError: The task involves an unknown service class.
        """
        return cls({name: service_class(name)() for name in task.involved_classes})

    @classmethod
    def for_task(cls, task: Task, states: Mapping[str, JsonObject]) -> Services:
        """Build a task's services: restored from `states` where given, else fresh.

        Args:
            task: The task.
            states: Snapshot per class name (see `snapshot`), for some or all involved classes.

        Raises:
            DatasetError: The task involves an unknown service class.
            SnapshotError: A snapshot is malformed.
        """
        instances: dict[str, object] = {}
        for name in task.involved_classes:
            service = service_class(name)
            if name in states:
                instances[name] = restore(service, states[name])
                continue
            instance = service()
            if name not in STATELESS_CLASSES:
                config = task.initial_config.get(name, {})
                instance._load_scenario(copy.deepcopy(config), long_context=task.long_context)
                if task.long_context:  # detach it from BFCL's module-level extension tables
                    instance = copy.deepcopy(instance)
            instances[name] = instance
        return cls(instances)

    def owner(self, function: str) -> str:
        """Return the class name of the involved service offering a function.

        Raises:
            UnknownFunctionError: No involved service offers it (the message says which
                class does, if another one does).
        """
        if function in self._owners:
            return self._owners[function]
        hint = ""
        if function in _OWNERS:
            hint = f"; it belongs to {_OWNERS[function]}, which this task does not involve"
        elif function.startswith("_"):
            hint = "; private methods cannot be called"
        raise UnknownFunctionError(function, tuple(self.instances), hint)

    def check(self, call: Call) -> str:
        """Check that a call can be made, without making it.

        Returns:
            The class name of the service that would run it.

        The call's own arguments are bound (no copies: nothing runs), against the method's
        signature read once per function (`_signature`).

        Raises:
            UnknownFunctionError: No involved service offers the function.
            CallArgumentError: The arguments do not fit the signature.
        """
        name = self.owner(call.function)
        _bind(getattr(self.instances[name], call.function), call, fresh=False)
        return name

    def invoke(self, call: Call) -> JsonValue:
        """Make a call on the service offering it and return its result as JSON.

        Arguments are deep copies of the call's; omitted mutable defaults are passed as fresh
        copies. Argument *types* are not checked against the methods' annotations: the data
        does not follow them (task multi_turn_base_173 calls `close_ticket(ticket_id=
        'ticket_001')` against `ticket_id: int`, and its tickets do have string ids). A wrong
        type shows when the method raises.

        Returns:
            The method's return value converted by `to_json_result`.

        Raises:
            UnknownFunctionError: No involved service offers the function; nothing ran.
            CallArgumentError: The arguments do not fit the signature; nothing ran.
            ToolCallError: The method raised (its exception is the `__cause__`). It may have
                changed the instance before raising: discard these services.
        """
        name = self.owner(call.function)
        method = getattr(self.instances[name], call.function)
        bound = _bind(method, call)
        with _global_precision() if name == "MathAPI" else contextlib.nullcontext():
            try:
                value = method(*bound.args, **bound.kwargs)
            except Exception as error:
                raise ToolCallError(call.text, error) from error
            return to_json_result(value)

    def state(self, name: str) -> JsonObject:
        """Return the snapshot of one service's state.

        Raises:
            SnapshotError: The state holds a value the codec does not know.
        """
        return snapshot(self.instances[name])

    def states(self) -> dict[str, JsonObject]:
        """Return the snapshot of every service's state, by class name."""
        return {name: self.state(name) for name in self.instances}


_PRECISION_LOCK = threading.Lock()


@contextlib.contextmanager
def _global_precision() -> Iterator[None]:
    # MathAPI sets mpmath's process-global precision and the thread's decimal precision, and
    # the text of its mpf result depends on the former: run it and convert its result alone,
    # then put both precisions back so nothing else in the process sees them changed.
    with _PRECISION_LOCK:
        dps, prec = mpmath.mp.dps, decimal.getcontext().prec
        try:
            yield
        finally:
            mpmath.mp.dps, decimal.getcontext().prec = dps, prec


_SIGNATURES: dict[Any, inspect.Signature] = {}
"""Each service method's signature, by function: `inspect.signature` costs ~0.2 ms a call and
the replay binds every call twice (checked in the step, applied in the host)."""


def _signature(method: Any) -> inspect.Signature:
    """The signature of `method` (a bound method: without ``self``), read once per function."""
    function = getattr(method, "__func__", method)  # one entry per function, not per instance
    signature = _SIGNATURES.get(function)
    if signature is None:
        signature = _SIGNATURES[function] = inspect.signature(method)
    return signature


def _bind(method: Any, call: Call, *, fresh: bool = True) -> inspect.BoundArguments:
    """Bind a call's arguments to `method`'s signature.

    With `fresh` (to invoke it), the arguments are deep copies of the call's and each omitted
    mutable default a fresh copy; without (only to check that the call fits), the call's own.

    Raises:
        CallArgumentError: The arguments do not fit the signature.
    """
    signature = _signature(method)
    args, kwargs = (copy.deepcopy(call.args), copy.deepcopy(call.kwargs)) if fresh else (
        call.args, call.kwargs
    )
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError as error:
        raise CallArgumentError(call.text, f"{call.function}() {error}") from None
    if fresh:
        for name, parameter in signature.parameters.items():
            if name not in bound.arguments and isinstance(parameter.default, list | dict | set):
                bound.arguments[name] = copy.deepcopy(parameter.default)
    return bound
