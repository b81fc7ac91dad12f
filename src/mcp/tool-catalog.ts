// The tools an MCP server lists (name, description, input schema), read from a `tools/list` result as it
// passes through, bounded, for discovery: what a catalog shows of each paid tool is what the server said.
import { hasExternalRef } from '../discovery/listing.ts'
import { TOOL_NAME, TOOLS_MAX } from './config.ts'

/** One tool as kept (mcp_tool_catalogs.tools): the server's words, bounded. */
export interface CatalogTool {
  name: string
  description?: string
  input_schema: Record<string, unknown>
}

/** Longer descriptions are cut: a catalog shows a summary, not a manual. */
const DESCRIPTION_MAX_CHARS = 2048
/** An input schema larger than this (JSON) is kept as an open object schema; so is one with an outside $ref. */
const SCHEMA_MAX_CHARS = 16_384
/** The whole catalog of one endpoint, JSON: tools past it are not kept. */
const CATALOG_MAX_CHARS = 256 * 1024

/** What a tool whose schema is unknown (or not kept) takes: an object of arguments. */
export const OPEN_SCHEMA: Record<string, unknown> = { type: 'object' }

/** The tools of a `tools/list` result, in its order; what is not a well-formed tool is skipped. */
export function readCatalog(result: Record<string, unknown>): CatalogTool[] {
  const out: CatalogTool[] = []
  if (!Array.isArray(result.tools)) return out
  const names = new Set<string>()
  let chars = 0
  for (const raw of result.tools as unknown[]) {
    if (out.length >= TOOLS_MAX) break
    if (typeof raw !== 'object' || raw === null) continue
    const t = raw as Record<string, unknown>
    if (typeof t.name !== 'string' || !TOOL_NAME.test(t.name) || names.has(t.name)) continue
    const tool: CatalogTool = { name: t.name, input_schema: schemaOf(t.inputSchema) }
    if (typeof t.description === 'string' && t.description.length > 0)
      tool.description = t.description.slice(0, DESCRIPTION_MAX_CHARS)
    chars += JSON.stringify(tool).length
    if (chars > CATALOG_MAX_CHARS) break
    names.add(t.name)
    out.push(tool)
  }
  return out
}

function schemaOf(raw: unknown): Record<string, unknown> {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) return OPEN_SCHEMA
  // A catalog must not have to fetch anything to read a schema.
  if (hasExternalRef(raw) || JSON.stringify(raw).length > SCHEMA_MAX_CHARS) return OPEN_SCHEMA
  return raw as Record<string, unknown>
}

/**
 * The catalog after a `tools/list` answer: a complete list replaces it; a page of a paged list (asked with a
 * cursor, or answered with a nextCursor) changes the tools it names and keeps the others.
 */
export function nextCatalog(
  stored: readonly CatalogTool[] | null,
  listed: CatalogTool[],
  complete: boolean,
): CatalogTool[] {
  if (complete || stored === null) return listed
  const byName = new Map(stored.map((t) => [t.name, t]))
  for (const t of listed) byName.set(t.name, t)
  return [...byName.values()].slice(0, TOOLS_MAX)
}

/** Whether two catalogs say the same (key order aside: jsonb reorders keys), to write only on change. */
export function sameCatalog(a: readonly CatalogTool[] | null, b: readonly CatalogTool[]): boolean {
  return a !== null && canonical(a) === canonical(b)
}

function canonical(x: unknown): string {
  if (Array.isArray(x)) return `[${x.map(canonical).join(',')}]`
  if (typeof x !== 'object' || x === null) return JSON.stringify(x)
  const o = x as Record<string, unknown>
  return `{${Object.keys(o)
    .sort()
    .map((k) => `${JSON.stringify(k)}:${canonical(o[k])}`)
    .join(',')}}`
}
