"""Everything behind the API: the runs of the agent, the jobs, snapshots, terminals and project
MCP servers, and the services the adapters call, wired together once.

The composition root (`app.py`) loads this module after the server listens, in a worker thread,
and builds the core with the first request that needs it: start-up pays only for what answers
the first requests (the sign-in actions, Account|read, Projects|list, the pages). Nothing here
listens or speaks HTTP.
"""

from __future__ import annotations

from dataclasses import dataclass

from totem.agent.assembly import Surroundings, assemble
from totem.agent.loop import Runs
from totem.agent.providers import Providers
from totem.agent.recovery import recover_changes
from totem.agent.rules import SavedRules
from totem.mcp.definitions import forge_definition
from totem.mcp.servers import McpServers
from totem.process.jobs import Jobs
from totem.process.terminal import Terminals
from totem.services.changes import Changes
from totem.services.exports import Exports
from totem.services.jobs import Jobs as JobsService
from totem.services.permissions import Permissions
from totem.services.project_servers import ProjectServersService
from totem.services.projects import Projects
from totem.services.prompts import Prompts
from totem.services.providers import ProvidersService
from totem.services.schedules import Schedules
from totem.services.session_rows import SessionRows
from totem.services.sessions import Sessions
from totem.services.settings import Settings
from totem.services.terminal import Terminal
from totem.services.worktrees import Worktrees
from totem.tools import default_registry
from totem.workspace.forge import ForgeDocs
from totem.workspace.snapshots import Snapshots


@dataclass(frozen=True)
class Services:
    """The use cases that adapters call (the API handlers as `ctx.services`, the MCP route, the
    scheduler): one service per group, built here once."""

    sessions: Sessions
    projects: Projects
    providers: ProvidersService
    changes: Changes
    schedules: Schedules
    settings: Settings
    servers: ProjectServersService
    worktrees: Worktrees
    terminal: Terminal
    jobs: JobsService
    permissions: Permissions
    exports: Exports


class Core:
    """The concerns and services of one Totem, over its store, hub and vault."""

    def __init__(self, config, store, hub, vault, sandbox=None):
        self.config = config
        self.sandbox = sandbox  # sandbox.Sandbox of the agent's processes (the App's)
        self.store = store
        self.providers = Providers(store, vault)
        # Holds the scrubber of tool, job and terminal output; filled in start() from the stored keys.
        provider_service = ProvidersService(self.providers, config)
        self.jobs = Jobs(store.ids.new, provider_service.scrubber)
        self.snapshots = Snapshots(store, hub, config.data, config.snapshotmb * 1024 * 1024)
        self.mcp_clients = McpServers()  # the project MCP servers that runs start
        forge_mcp = forge_definition(config.forgeurl) if config.forgemcp and config.forge else None
        rules = SavedRules(store, config.rules)  # read and written by the gate and by Permissions
        around = Surroundings(rules, self.jobs, provider_service.scrubber, self.snapshots, self.mcp_clients,
                              ForgeDocs(config.data, config.forgeurl), forge_mcp, sandbox, config.instructions)
        self.runs = Runs(store, hub, self.providers, assemble(store, hub, default_registry(), around), config.steps)
        self.terminals = Terminals(hub, provider_service.scrubber, config.terminalshell)
        settings = Settings(store, config)
        rows = SessionRows(store, self.runs)
        worktrees = Worktrees(rows, store, hub, self.runs, config.data)
        terminal = Terminal(rows, self.terminals)
        jobs = JobsService(rows, self.jobs)
        prompts = Prompts(rows, store, hub, self.runs, self.providers, settings)
        sessions = Sessions(rows, store, hub, self.runs, prompts, worktrees, jobs, terminal, sandbox)
        projects = Projects(store, sessions, self.snapshots, config.data)
        kinds = lambda: self.runs.registry.kinds()  # noqa: E731 (tests may replace the registry)
        self.services = Services(sessions=sessions, projects=projects,
                                 providers=provider_service,
                                 changes=Changes(store, hub, self.snapshots, self.runs, self.jobs,
                                                 pinned=self.runs.gate.pinned_files),
                                 schedules=Schedules(store, hub, sessions, self.providers),
                                 settings=settings,
                                 servers=ProjectServersService(store, self.mcp_clients, forge_mcp,
                                                               provider_service.scrubber),
                                 worktrees=worktrees, terminal=terminal, jobs=jobs,
                                 permissions=Permissions(rules, kinds, projects, self.runs),
                                 exports=Exports(rows, store, hub, provider_service.scrubber))

    async def start(self) -> None:
        """Before anything reads or changes a project: finish what a crash left half-done, know
        the secrets to scrub, then start the scheduler."""
        await recover_changes(self.store)  # what a crash left half-done is read from the disk
        await self.services.changes.recover()  # an undo, redo or Save as a kill interrupted
        self.snapshots.start()
        await self.services.providers.refresh_scrubber()
        self.services.schedules.scheduler.start()

    async def stop(self) -> None:
        await self.services.schedules.scheduler.stop()
        await self.runs.stop_all()
        await self.jobs.stop_all()
        await self.terminals.stop_all()
        await self.snapshots.close()
