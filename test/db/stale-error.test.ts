// A connection the server ends while a query is in flight leaves nothing behind for the next query. postgres
// 3.4.9 kept the server's last error and the query it was for across the socket's close, and the reconnected
// socket's first ReadyForQuery handed that old error to the next query, which never ran (it failed with
// "terminating connection…" or "the database system is shutting down" seconds after the server was back).
// patches/postgres+3.4.9.patch ends the in-flight query when its socket closes. Needs a server: the embedded
// database has no backend to terminate.
import { createServer, type Server, type Socket, connect as tcpConnect } from 'node:net'
import postgres from 'postgres'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createSql, type Sql } from '../../src/db/sql.ts'
import { freshDatabaseUrl, usingServer } from '../helpers/database.ts'
import { waitFor } from '../helpers/wait-for.ts'

let url: string
let admin: postgres.Sql

beforeAll(async () => {
  if (!usingServer) return
  url = (await freshDatabaseUrl())!
  admin = postgres(url, { max: 1, onnotice: () => {} })
})
afterAll(async () => {
  await admin?.end()
})

/** One pooled connection, as the service's pool makes them; ended after `use`. */
async function withPool(at: string, use: (sql: Sql) => Promise<void>): Promise<void> {
  const sql = createSql(at, { max: 1, sessions: 0 })
  try {
    await use(sql)
  } finally {
    await sql.end({ timeout: 1 })
  }
}

/** The ErrorResponse pg_terminate_backend makes the backend send before it closes the socket. */
function terminatingError(): Buffer {
  const fields = ['SFATAL', 'VFATAL', 'C57P01', 'Mterminating connection due to administrator command']
  const body = Buffer.concat([...fields.map((f) => Buffer.from(`${f}\0`)), Buffer.from([0])])
  const head = Buffer.alloc(5)
  head.write('E', 0)
  head.writeInt32BE(body.length + 4, 1)
  return Buffer.concat([head, body])
}

describe.skipIf(!usingServer)('a connection ended by the server under a query', () => {
  it('fails the query it was running and runs the next one on a new connection', () =>
    withPool(url, async (sql) => {
      const pid = (await sql<{ pid: number }[]>`SELECT pg_backend_pid() AS pid`)[0]!.pid
      const sleeping = sql`SELECT pg_sleep(10)`.then(
        () => null,
        (e: { code?: string }) => e,
      )
      await waitFor(
        async () =>
          (await admin`SELECT 1 FROM pg_stat_activity WHERE pid = ${pid} AND query LIKE '%pg_sleep%'`)[0],
        { what: 'the sleep running on its backend' },
      )
      await admin`SELECT pg_terminate_backend(${pid})`
      const failed = await sleeping
      expect(['57P01', 'CONNECTION_CLOSED']).toContain(failed?.code)
      // The next query runs on a new backend and answers; it is not handed the old backend's error.
      const one = (await sql<{ one: number }[]>`SELECT 1 AS one`)[0]!.one
      expect(one).toBe(1)
      const again = (await sql<{ again: number }[]>`SELECT pg_backend_pid() AS again`)[0]!.again
      expect(again).not.toBe(pid)
    }))

  it('runs the first query after a connection ended while it fetched its array types', async () => {
    // A proxy that, on the first connection only, answers the driver's array-type query as a terminated
    // backend does (the error, then the close); every later connection passes through.
    const target = new URL(url)
    let first = true
    const server: Server = createServer((client: Socket) => {
      const upstream = tcpConnect(Number(target.port || 5432), target.hostname)
      const killHere = first
      first = false
      client.on('data', (d) => {
        if (killHere && d.includes('typcategory')) {
          client.end(terminatingError())
          upstream.destroy()
          return
        }
        upstream.write(d)
      })
      upstream.on('data', (d) => client.writable && client.write(d))
      upstream.on('error', () => client.destroy())
      client.on('error', () => upstream.destroy())
      upstream.on('close', () => client.destroy())
      client.on('close', () => upstream.destroy())
    })
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
    try {
      const via = new URL(url)
      via.hostname = '127.0.0.1'
      via.port = String((server.address() as { port: number }).port)
      await withPool(via.toString(), async (sql) => {
        // The query waiting for the connection runs on the reconnected one, the array types fetched there.
        const one = (await sql<{ one: number }[]>`SELECT 1 AS one`)[0]!.one
        expect(one).toBe(1)
        const xs = (await sql<{ xs: bigint[] }[]>`SELECT ARRAY[1, 2]::int8[] AS xs`)[0]!.xs
        expect(xs).toEqual([1n, 2n])
      })
    } finally {
      await new Promise((r) => server.close(r))
    }
  })
})
