"""``Think``: the agent — a model, a system prompt, tools, plugins and a store."""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import logging
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .chat.attachments import AttachmentLimits
from .durable.orphan_watch import OrphanWatch
from .durable.takeover import Takeovers, drain
from .hooks.dispatch import HookDispatcher
from .hooks.limits import DEFAULT_HOOK_TIMEOUT
from .hooks.names import BrokenPlugins
from .hooks.plugins import build_plugin_manager
from .mcp import MCPServer, MCPTools
from .models._http import SharedClient
from .policy import CompactionConfig, ContextOverflowConfig, RetryConfig
from .session import Session
from .store import AsyncStore, Store, open_store
from .subagents import subagent_tool
from .tools import AnyTool, Tool
from .turn.compaction import Compactor, Summarizer
from .turn.loop import TurnDeps
from .types import TurnConfig

logger = logging.getLogger("think.agent")

#: No system prompt unless one is given: nothing is sent that the application did not write.
DEFAULT_SYSTEM = ""


class Think:
    """An agent. One plugin manager per agent, so two agents in one process can differ.

    :param model: a :class:`~think_core.models.base.Model` or a model string
        (``"openai:gpt-4o-mini"``, ``"anthropic:claude-..."``, ``"google:gemini-2.5-flash"``,
        ``"openai-responses:NAME"``, ``"openai-compatible:NAME@URL"``).
    :param system: the system prompt (none by default).
    :param temperature: sampling temperature of every model call (the provider's default when
        ``None``); like ``max_tokens``, ``seed`` and ``output``, a default that a call's
        ``config=TurnConfig(...)`` and a plugin's ``before_turn`` answer override.
    :param max_tokens: output tokens per model call at most (``TurnConfig.max_output_tokens``).
    :param seed: sampling seed, for providers that take one.
    :param output: structured output of every turn: a pydantic model class or a JSON schema dict
        (``TurnResult.output`` holds the parsed value).
    :param tools: :class:`~think_core.tools.Tool` objects (see ``@tool``) and
        :class:`~think_core.mcp.MCPServer` objects (their tools are added when a session opens).
    :param plugins: plugin objects registered after the entry-point plugins (so they run first).
    :param store: a :class:`~think_core.store.Store`, a SQLite file path, a ``postgresql://`` URL (the
        ``postgres`` extra), or ``None`` for ``:memory:``.
    :param settings: per-plugin settings, keyed by plugin name, validated by each plugin's model.
    :param max_steps: model steps per turn at most.
    :param load_entrypoints: load plugins from the ``think`` entry-point group.
    :param disable: entry-point plugin names not to load (never imported); a name that matches no
        installed plugin is a :class:`~think_core.errors.ConfigurationError`.
    :param broken_plugins: ``"error"`` (the default, or ``$THINK_BROKEN_PLUGINS``): an installed
        plugin that fails to load raises :class:`~think_core.errors.PluginLoadError`; ``"warn"``:
        it is logged, listed as failed, and the agent runs without it.
    :param send_reasoning: include reasoning chunks in UI streams.
    :param context_overflow: ``{"reactive": bool, "max_retries": 1, "proactive": {"max_input_tokens":
        N, "headroom": 0.9, "max_compactions": 1}}``: compact and re-run a turn that overflowed the
        model's context; compact before a step once the last step's input passes the threshold.
    :param retry: ``{"max_retries": 2, "initial_delay": 0.5, "max_delay": 20}``: retries of a step that
        failed with a ``transient`` / ``rate_limit`` error before producing output.
    :param compaction: ``{"protect_head": 1, "tail_tokens": 2000, "min_tail_messages": 2,
        "summary_budget_tokens": 8000}``.
    :param attachments: ``{"max_file_bytes": 10 MiB, "max_message_bytes": 20 MiB}``: how large
        a file a user sends may be, and one message's files together (an
        :class:`~think_core.chat.attachments.AttachmentLimits`); larger ones, malformed data URLs
        and bytes that are not their ``mediaType`` raise
        :class:`~think_core.errors.InvalidAttachment` before anything is stored.
    :param summarizer: ``fn(messages, budget_tokens) -> str`` (sync or async) used instead of the
        model to summarise compacted messages.
    :param max_idle_sessions: idle sessions kept in memory (least recently used dropped first;
        a dropped session is reopened on next use, and ``configure_session`` fires again).
    :param hook_timeout: seconds a hook implementation may take (``None``: no limit); a plugin
        may set its own (``hook_timeout`` in its settings section, its settings model, or as an
        attribute). An implementation past its limit fails under its hook's failure policy: a
        ``before_tool_call`` blocks the call, an observer is logged and skipped.
    :param submission_lease: seconds a running durable submission stays claimed without a
        heartbeat; after that, a process that has the session open recovers it (its owner
        died), and so does one that recovers (:meth:`recover`) whether it has it open or not.
        An owner that was a process on this host is recovered at once when it is gone.
    :param recover_on_start: resume every session with unfinished durable submissions
        (:meth:`recover`) as soon as the agent runs (``async with``, or the first session opened).
    :param recovery_concurrency: sessions :meth:`recover` drains at once, and sessions this
        process takes over at once from owners that died later (fewer while it runs turns).
    """

    def __init__(
        self,
        model: Any = None,
        *,
        system: str = DEFAULT_SYSTEM,
        temperature: float | None = None,
        max_tokens: int | None = None,
        seed: int | None = None,
        output: Any = None,
        tools: Iterable[AnyTool | MCPServer] = (),
        plugins: Iterable[Any] = (),
        store: Store | str | None = None,
        settings: Mapping[str, Any] | None = None,
        max_steps: int = 10,
        load_entrypoints: bool = True,
        disable: Iterable[str] = (),
        broken_plugins: BrokenPlugins | None = None,
        send_reasoning: bool = True,
        context_overflow: ContextOverflowConfig | Mapping[str, Any] | None = None,
        retry: RetryConfig | Mapping[str, Any] | None = None,
        compaction: CompactionConfig | Mapping[str, Any] | None = None,
        attachments: AttachmentLimits | Mapping[str, Any] | None = None,
        summarizer: Summarizer | None = None,
        submission_lease: float = 30.0,
        max_idle_sessions: int = 1000,
        hook_timeout: float | None = DEFAULT_HOOK_TIMEOUT,
        recover_on_start: bool = False,
        recovery_concurrency: int = 4,
    ) -> None:
        self.settings: dict[str, Any] = dict(settings or {})
        # Models built from strings share one HTTP client (connection reuse), closed by aclose().
        self._http = SharedClient()
        self.model = self.resolve_model(model) if model is not None else None
        self.system = system
        #: The defaults under every turn's settings (None: none given, the turn is as before).
        self.defaults: TurnConfig | None = None
        if (temperature, max_tokens, seed, output) != (None, None, None, None):
            self.defaults = TurnConfig(temperature=temperature, max_output_tokens=max_tokens, seed=seed, output=output)
        self.tools: dict[str, AnyTool] = {}
        tools = list(tools)
        mcp_servers = [t for t in tools if isinstance(t, MCPServer)]
        if mcp_servers:  # the plugin adds the servers' tools to self.tools, and aclose() closes them
            plugins = [*plugins, MCPTools(mcp_servers, self.tools)]
        for t in tools:
            if isinstance(t, MCPServer):
                continue
            if not isinstance(t, Tool):
                raise TypeError(f"tools must be Tool objects (use @tool), got {t!r}")
            self.tools[t.name] = t
        self.max_steps = max_steps
        self.send_reasoning = send_reasoning
        self.context_overflow = ContextOverflowConfig.model_validate(context_overflow or {})
        self.retry = RetryConfig.model_validate(retry or {})
        self.compaction = CompactionConfig.model_validate(compaction or {})
        #: How large the files a user sends may be (checked before anything is stored).
        self.attachments = AttachmentLimits.model_validate(attachments or {})
        self.summarizer = summarizer
        if submission_lease <= 0:
            raise ValueError("submission_lease must be positive")
        self.submission_lease = submission_lease
        self.plugin_manager = build_plugin_manager(
            load_entrypoints=load_entrypoints,
            disable=disable,
            plugins=plugins,
            settings=self.settings,
            broken_plugins=broken_plugins,
        )
        self.hooks = HookDispatcher(self.plugin_manager, hook_timeout=hook_timeout, settings=self.settings)
        #: Plugins of agents that called this one as a sub-agent: run here, closed by their owner.
        self.borrowed_plugins: list[object] = []
        self.store: Store = open_store(store)
        self.db = AsyncStore(self.store)  # what the engine awaits: store calls off the event loop
        # Sessions in use (a running turn, a drain, a server connection) are found through weak
        # references, so there is never a second Session object for one id; only the most
        # recently used idle ones are kept alive, so a long-running server does not grow forever.
        self._sessions: weakref.WeakValueDictionary[str, Session] = weakref.WeakValueDictionary()
        self._recent: OrderedDict[str, Session] = OrderedDict()
        self.max_idle_sessions = max_idle_sessions
        if recovery_concurrency < 1:
            raise ValueError("recovery_concurrency must be at least 1")
        self.recovery_concurrency = recovery_concurrency
        self._recover_pending = recover_on_start
        self._recovery: asyncio.Task[None] | None = None
        self._recovery_start: asyncio.Task[list[str]] | None = None
        self._takeovers = Takeovers(self.session, limit=recovery_concurrency, busy=self._running_turns)
        self._watch = OrphanWatch(
            self.db,
            lease=submission_lease,
            open_sessions=lambda: [sid for sid, s in list(self._sessions.items()) if s.is_open],
            resume=self._resume,
        )

    def resolve_model(self, spec: Any) -> Any:
        """A model object for ``spec`` (a model, or a model string)."""
        if hasattr(spec, "stream"):
            return spec
        from .models.resolve import resolve_model

        return resolve_model(spec, client=self._http)

    def as_tool(
        self, name: str, description: str, *, inherit_plugins: bool = True, read_only: bool = False
    ) -> AnyTool:
        """This agent as a tool of another (a sub-agent): a call runs one turn of this agent for
        the ``task`` the model gives, in a child session linked to the call, streaming its
        progress as preliminary results, cancelled with the calling turn, its usage counted in
        the caller's. With ``inherit_plugins`` (the default) the caller's plugins are loaded into
        this agent and its turn gets the caller's body, so the caller's guards and budgets hold
        for what the sub-agent does. ``read_only`` annotates the tool itself (a read-only guard
        lets it through; the sub-agent's own calls are still checked). See
        :mod:`think_core.subagents`."""
        return subagent_tool(self, name, description, inherit_plugins=inherit_plugins, read_only=read_only)

    def session(self, session_id: str = "default") -> Session:
        """The session ``session_id`` (created on first use; ``configure_session`` fires once)."""
        session = self._sessions.get(session_id)
        if session is None:
            session = Session(
                session_id,
                deps=self._turn_deps(),
                plugin_manager=self.plugin_manager,
                settings=self.settings,
                send_reasoning=self.send_reasoning,
                submission_lease=self.submission_lease,
                attachments=self.attachments,
                on_open=self._session_opened,
            )
            self._sessions[session_id] = session
        self._recent[session_id] = session
        self._recent.move_to_end(session_id)
        while len(self._recent) > self.max_idle_sessions:
            self._recent.popitem(last=False)
        return session

    def _session_opened(self, session: Session) -> None:
        self._watch.start()
        if self._recover_pending:
            self._recover_pending = False
            self._recovery_start = asyncio.get_running_loop().create_task(self.recover(), context=contextvars.Context())

    def _resume(self, session_id: str) -> None:
        session = self._sessions.get(session_id)
        if session is not None:
            session.resume_submissions()

    def _running_turns(self) -> int:
        return sum(len(session.active_request_ids) for session in list(self._sessions.values()))

    async def recover(self) -> list[str]:
        """Resume every session that has pending or orphaned durable submissions, in the
        background, ``recovery_concurrency`` sessions at a time; returns their ids. A
        submission another live process runs is left to it (its session waits for it, and
        takes it over if that process dies). From then on, submissions that owners dying
        later leave behind are taken over too, in every session of the store, open here or
        not (:mod:`think_core.durable.takeover`). ``think serve`` calls this at start-up."""
        self._watch.sweep(self._takeovers)
        session_ids = await self.db.pending_session_ids()
        if session_ids:
            previous = self._recovery
            self._recovery = asyncio.get_running_loop().create_task(
                self._drain_sessions(session_ids, previous), name="think-recover", context=contextvars.Context()
            )
        return session_ids

    async def _drain_sessions(self, session_ids: list[str], previous: asyncio.Task[None] | None) -> None:
        if previous is not None:
            await asyncio.gather(previous, return_exceptions=True)
        slots = asyncio.Semaphore(self.recovery_concurrency)

        async def drain_one(session_id: str) -> None:
            async with slots:
                await drain(session_id, self.session)

        await asyncio.gather(*(drain_one(sid) for sid in session_ids))

    def listen_streams(self, callback: Callable[[str, str], None]) -> Callable[[], None] | None:
        """Call ``callback(session_id, stream_id)`` (on a listener thread) for every turn that
        another process sharing the store starts streaming; returns the function that stops
        listening, or ``None`` when the store is not shared between machines. Blocking: call it
        with ``asyncio.to_thread``."""
        shared = self.db.shared
        return shared.listen_streams(callback) if shared is not None else None

    def _turn_deps(self) -> TurnDeps:
        """What this agent's turns use, read when a session is created."""
        return TurnDeps(
            hooks=self.hooks,
            db=self.db,
            tools=self.tools,
            system=self.system,
            model=self.model,
            resolve_model=self.resolve_model,
            max_steps=self.max_steps,
            retry=self.retry,
            context_overflow=self.context_overflow,
            compactor=Compactor(self.db, self.model, self.compaction, self.summarizer),
            defaults=self.defaults,
        )

    @property
    def sessions(self) -> dict[str, Session]:
        return dict(self._sessions)

    def close(self) -> None:
        """Close the store."""
        self.db.shutdown()
        self.store.close()

    async def aclose(self) -> None:
        """Stop background drains, let plugins release what they hold (a plugin may define
        ``async def aclose(self)`` or ``def close(self)``: the analytics HTTP sink flushes
        there), then close the store."""
        await self._watch.aclose()
        await self._takeovers.aclose()
        for task in (self._recovery_start, self._recovery):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        for session in list(self._sessions.values()):
            await session.aclose()
        for plugin in self.plugin_manager.get_plugins():
            closer = getattr(plugin, "aclose", None) or getattr(plugin, "close", None)
            if not callable(closer) or any(plugin is borrowed for borrowed in self.borrowed_plugins):
                continue
            try:
                result = closer()
                if inspect.isawaitable(result):
                    await result
            except Exception:
                logger.warning("plugin %r failed to close", self.plugin_manager.get_name(plugin), exc_info=True)
        await self._http.aclose()
        self.close()

    def __enter__(self) -> Think:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    async def __aenter__(self) -> Think:
        if self._recover_pending:
            self._recover_pending = False
            await self.recover()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()
