// Which settler slot this data-plane process owns: a PostgreSQL session advisory lock per slot, tried in order
// on a dedicated connection, so two processes never share a slot's nonces (workers and instances alike). The
// embedded database is one session shared by the processes of one machine (locks would all succeed there):
// a worker takes its index, the only processes that can reach that database being this supervisor's.
import type { Sql } from './sql.ts'

/** The advisory lock's first key (the second is the slot): apart from the leader lock's single key. */
const SLOT_LOCK_CLASS = 7_301_003

export interface SettlerSlot {
  slot: number
  /** False once the session holding the lock was lost (its nonces may be another's now). */
  held(): boolean
  release(): Promise<void>
}

export interface ClaimOptions {
  embedded: boolean
  /** The worker's index on this machine (0 alone). */
  workerIndex: number
  slots: number
  /** How often the session is checked alive (a lost session frees the lock: stop using the slot). */
  keepaliveMs: number
  onLost(err: unknown): void
}

/** The first free slot, or null when every slot is held by another process. */
export async function claimSettlerSlot(sql: Sql, o: ClaimOptions): Promise<SettlerSlot | null> {
  if (o.embedded) {
    if (o.workerIndex >= o.slots) return null
    return { slot: o.workerIndex, held: () => true, release: async () => {} }
  }
  const conn = await sql.reserve()
  let slot = -1
  try {
    for (let i = 0; i < o.slots; i++) {
      const [row] = await conn<{ ok: boolean }[]>`SELECT pg_try_advisory_lock(${SLOT_LOCK_CLASS}, ${i}) AS ok`
      if (row?.ok) {
        slot = i
        break
      }
    }
  } catch (err) {
    conn.release()
    throw err
  }
  if (slot < 0) {
    conn.release()
    return null
  }
  let alive = true
  const timer = setInterval(() => {
    conn`SELECT 1`.catch((err) => {
      if (!alive) return
      // The lock went with the session: another process may own this slot from now on.
      alive = false
      clearInterval(timer)
      o.onLost(err)
    })
  }, o.keepaliveMs)
  timer.unref()
  return {
    slot,
    held: () => alive,
    async release() {
      clearInterval(timer)
      if (alive) await conn`SELECT pg_advisory_unlock(${SLOT_LOCK_CLASS}, ${slot})`.catch(() => {})
      alive = false
      conn.release()
    },
  }
}
