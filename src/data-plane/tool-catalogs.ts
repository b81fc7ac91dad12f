// Keeps the tools a listed MCP endpoint's server lists, as its tools/list answers pass through: written only
// when they differ from what the endpoint was compiled with, at most once a minute per endpoint and process,
// then every instance recompiles the endpoint (its 402s describe each tool with the server's words).
import { saveToolCatalog } from '../db/discovery.ts'
import type { Sql } from '../db/sql.ts'
import { type CatalogTool, nextCatalog, sameCatalog } from '../mcp/tool-catalog.ts'
import type { Logger } from '../observability/logger.ts'

/** A server that answers each session with other tools would otherwise write on every tools/list. */
const MIN_INTERVAL_MS = 60_000
/** Endpoints remembered for the interval; past it the oldest is forgotten (it may write once more). */
const REMEMBERED_MAX = 10_000

export class ToolCatalogs {
  private readonly lastWriteMs = new Map<string, number>()

  constructor(
    private readonly sql: Sql,
    private readonly logger: Logger,
    /** Drops the endpoint's compiled copy here and in sibling workers (other instances hear the NOTIFY). */
    private readonly onChanged: (endpointId: string) => unknown,
    private readonly now: () => number = Date.now,
    private readonly minIntervalMs = MIN_INTERVAL_MS,
  ) {}

  /** A tools/list answer of the endpoint passed through (stored: what it was compiled with). */
  seen(
    endpointId: string,
    stored: readonly CatalogTool[] | null,
    listed: CatalogTool[],
    complete: boolean,
  ): void {
    const next = nextCatalog(stored, listed, complete)
    if (sameCatalog(stored, next)) return
    const nowMs = this.now()
    const last = this.lastWriteMs.get(endpointId)
    if (last !== undefined && nowMs - last < this.minIntervalMs) return
    this.lastWriteMs.delete(endpointId)
    if (this.lastWriteMs.size >= REMEMBERED_MAX)
      this.lastWriteMs.delete(this.lastWriteMs.keys().next().value!)
    this.lastWriteMs.set(endpointId, nowMs)
    saveToolCatalog(this.sql, endpointId, next).then(
      () => this.onChanged(endpointId),
      // Discovery text, not money: the next tools/list after the interval tries again.
      (err) => this.logger.warn('MCP tool catalog not kept', { endpoint_id: endpointId, err }),
    )
  }
}
