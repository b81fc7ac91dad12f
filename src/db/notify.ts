// Cross-instance cache invalidation over PostgreSQL LISTEN/NOTIFY. The embedded database has one process,
// so there is nobody else to tell: listening is skipped there and local invalidation is enough.
import { ENDPOINT_CHANGED_CHANNEL } from './endpoints.ts'
import type { Sql } from './sql.ts'

export async function listenForEndpointChanges(
  sql: Sql,
  onChange: (id: string) => void,
): Promise<() => Promise<void>> {
  const { unlisten } = await sql.listen(ENDPOINT_CHANGED_CHANNEL, (payload) => onChange(payload))
  return unlisten
}
