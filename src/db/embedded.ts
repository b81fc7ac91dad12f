// Embedded PostgreSQL (PGlite, WASM) served on a loopback socket, so the service uses the same `postgres`
// driver and the same SQL whether or not a DATABASE_URL is given. PGlite is loaded only when it is used: the
// production image leaves it out (a server database is what production runs on).
import { mkdirSync } from 'node:fs'
import { resolve } from 'node:path'
import { acquireLockFile, type HeldLock } from '../lock-file.ts'

/** The embedded database's packages are not installed (the production image): set DATABASE_URL. */
export class EmbeddedDatabaseMissingError extends Error {
  readonly code = 'TOLLGATE_EMBEDDED_DATABASE_MISSING'
}

async function loadPglite() {
  try {
    const [{ PGlite }, { PGLiteSocketServer }] = await Promise.all([
      import('@electric-sql/pglite'),
      import('@electric-sql/pglite-socket'),
    ])
    return { PGlite, PGLiteSocketServer }
  } catch (cause) {
    throw new EmbeddedDatabaseMissingError(
      'no DATABASE_URL, and the embedded database (@electric-sql/pglite) is not installed here, as in the ' +
        'production image: set DATABASE_URL to a PostgreSQL database that exists',
      { cause },
    )
  }
}

/**
 * A throwaway database (`memory://`) starts by running initdb: ~5 s of CPU on a two-core machine, most of its
 * start. A process that starts many of them (the test suite starts one for each service it runs) can hand
 * over an image of a freshly initialised data directory (`throwawayDatabaseImage`) to start them from
 * instead, which takes under a second. A directory kept across restarts never starts from it.
 */
let throwawayImage: Blob | null = null

export function startThrowawayDatabasesFrom(image: Blob | null): void {
  throwawayImage = image
}

/** A freshly initialised, empty data directory as PGlite dumps it (an uncompressed tar). */
export async function throwawayDatabaseImage(): Promise<Uint8Array> {
  const { PGlite } = await loadPglite()
  const db = await PGlite.create('memory://')
  try {
    const dump = await db.dumpDataDir('none')
    return new Uint8Array(await dump.arrayBuffer())
  } finally {
    await db.close()
  }
}

export interface EmbeddedDatabase {
  url: string
  stop(): Promise<void>
}

/** dataDir: a directory kept across restarts, or 'memory://' for a throwaway database. */
export async function startEmbeddedDatabase(options: { dataDir: string }): Promise<EmbeddedDatabase> {
  let lock: HeldLock | null = null
  if (!options.dataDir.startsWith('memory://')) {
    // Two processes on one PGlite folder corrupt it: the second start stops here, before opening it. The
    // lock sits beside the folder, not in it (PGlite owns the folder's contents).
    lock = acquireLockFile(`${resolve(options.dataDir)}.lock`, `the embedded database ${options.dataDir}`)
    mkdirSync(options.dataDir, { recursive: true })
  }
  try {
    const { PGlite, PGLiteSocketServer } = await loadPglite()
    const image = options.dataDir.startsWith('memory://') ? throwawayImage : null
    const db = await PGlite.create(options.dataDir, image ? { loadDataDir: image } : {})
    // PGlite is a single session. Its socket server multiplexes connections onto it, which is only safe
    // for one client connection at a time: prepared statements and session state would be shared.
    const server = new PGLiteSocketServer({ db, host: '127.0.0.1', port: 0, maxConnections: 4 })
    await server.start()
    const address = server.getServerConn()
    let stopped = false
    return {
      url: `postgres://postgres@${address}/postgres?sslmode=disable`,
      async stop() {
        if (stopped) return
        stopped = true
        try {
          await server.stop()
          await db.close()
        } finally {
          lock?.release()
        }
      },
    }
  } catch (err) {
    lock?.release()
    throw err
  }
}
