// Cross-instance cache invalidation over PostgreSQL LISTEN/NOTIFY. The embedded database has no NOTIFY
// between processes, so listening is skipped there; its worker processes hear of changes through their
// supervising parent instead (data-plane/workers.ts).
import { ENDPOINT_CHANGED_CHANNEL } from './endpoints.ts'
import type { Sql } from './sql.ts'

export async function listenForEndpointChanges(
  sql: Sql,
  onChange: (id: string) => void,
): Promise<() => Promise<void>> {
  const { unlisten } = await sql.listen(ENDPOINT_CHANGED_CHANNEL, (payload) => onChange(payload))
  return unlisten
}
