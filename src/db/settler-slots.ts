// Which settler slot this data-plane process owns: a PostgreSQL session advisory lock per slot, tried in order
// on a dedicated connection, so two processes never share a slot's nonces (workers and instances alike). The
// embedded database is one session shared by the processes of one machine (locks would all succeed there):
// a worker takes its index, the only processes that can reach that database being this supervisor's.
import type { Sql } from './sql.ts'

/** The advisory lock's first key (the second is the slot): apart from the leader lock's single key. */
const SLOT_LOCK_CLASS = 7_301_003

export interface SettlerSlot {
  slot: number
  /** False while the session holding the lock is lost (its nonces may be another's then). */
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
  /** The session holding the lock was lost: stop using the slot's key. */
  onLost(err: unknown): void
  /** The same slot's lock is held again (after onLost): its nonce must be read afresh. */
  onRegained(): void
  /**
   * Look from the last slot down (the facilitator's settler): the data planes take theirs from 0 up, so the
   * two kinds meet only when every slot is taken, and a data plane keeps the slot it is expected to hold.
   */
  fromTop?: boolean
}

/** The first free slot (the last, fromTop), or null when every slot is held by another process. */
export async function claimSettlerSlot(sql: Sql, o: ClaimOptions): Promise<SettlerSlot | null> {
  if (o.embedded) {
    if (o.workerIndex >= o.slots) return null
    return { slot: o.workerIndex, held: () => true, release: async () => {} }
  }
  const conn = await sql.reserve()
  let slot = -1
  try {
    for (let n = 0; n < o.slots; n++) {
      const i = o.fromTop ? o.slots - 1 - n : n
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
  let current: Awaited<ReturnType<Sql['reserve']>> | null = conn
  let checking = false
  const check = async () => {
    if (checking) return
    checking = true
    try {
      if (alive && current !== null) {
        await current`SELECT 1`
        return
      }
      // Lost: take the same slot again once the database is back (its key, and so its nonces, are ours
      // again only under the lock; the settler reads its nonce from the chain afresh).
      current ??= await sql.reserve()
      const [row] = await current<
        { ok: boolean }[]
      >`SELECT pg_try_advisory_lock(${SLOT_LOCK_CLASS}, ${slot}) AS ok`
      if (row?.ok) {
        alive = true
        o.onRegained()
      }
    } catch (err) {
      if (alive) {
        // The lock went with the session: another process may own this slot from now on.
        alive = false
        o.onLost(err)
      }
      current?.release()
      current = null
    } finally {
      checking = false
    }
  }
  const timer = setInterval(() => void check(), o.keepaliveMs)
  timer.unref()
  return {
    slot,
    held: () => alive,
    async release() {
      clearInterval(timer)
      if (alive && current !== null)
        await current`SELECT pg_advisory_unlock(${SLOT_LOCK_CLASS}, ${slot})`.catch(() => {})
      alive = false
      current?.release()
      current = null
    },
  }
}
