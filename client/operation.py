"""``@operation``: a plan written once becomes a method of both clients.

On :class:`~client.FractalClient` the method returns the plan's result; on
:class:`~client.AsyncFractalClient` it returns a coroutine of it (which ``asyncio.create_task``
takes). Type checkers see both forms, with the plan's own parameters.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload

from client.plans import Plan
from client.transport import AsyncTransport, SyncTransport

P = ParamSpec("P")
T = TypeVar("T")


class operation(Generic[P, T]):  # noqa: N801 (used as a decorator)
    """A method whose body is a plan (see :mod:`client.plans`), run by the client's transport."""

    def __init__(self, plan: Callable[Concatenate[Any, P], Plan[T]]) -> None:
        self.plan = plan
        self.__doc__ = plan.__doc__
        self.__wrapped__ = plan
        signature = inspect.signature(plan)
        self._signature = signature.replace(parameters=list(signature.parameters.values())[1:])

    @overload
    def __get__(self, client: None, owner: type) -> operation[P, T]: ...

    @overload
    def __get__(self, client: SyncTransport, owner: type) -> Callable[P, T]: ...

    @overload
    def __get__(
        self, client: AsyncTransport, owner: type
    ) -> Callable[P, Coroutine[Any, Any, T]]: ...

    def __get__(self, client: Any, owner: type) -> Any:
        if client is None:
            return self

        @functools.wraps(self.plan)
        def bound(*args: Any, **kwargs: Any) -> Any:
            return client.run(self.plan(client, *args, **kwargs))

        bound.__signature__ = self._signature  # type: ignore[attr-defined]
        return bound
