// What a paid call costs on disk, calls and ledger entries apart, for each way of booking its revenue: per
// call (before migration 0050, and x402 calls still) and per capture batch of a few sizes. Each layout is
// seeded by the history seed (bench/history/seed.ts) into a database of its own on a PostgreSQL server,
// measured (pg_total_relation_size: heap, indexes, TOAST; every partition), then dropped.
//   npx tsx bench/history/storage-per-call.ts [--rows 200000] [--batches 0,1,10,50] [--db tollgate_t_storage]
import { parseArgs } from 'node:util'
import { migrate } from '../../src/db/migrate.ts'
import { createSql } from '../../src/db/sql.ts'
import { seedHistory } from './seed.ts'
import { databaseUrl, dropDatabase, recreateDatabase } from './seeded-database.ts'

const { values } = parseArgs({
  options: {
    rows: { type: 'string' },
    batches: { type: 'string' },
    db: { type: 'string' },
  },
})
const rows = Number(values.rows ?? 200_000)
const layouts = (values.batches ?? '0,1,10,50').split(',').map(Number)
const name = values.db ?? 'tollgate_t_storage'
const server = process.env.BENCH_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres'
const calls = Math.floor(rows / 2)
const WALLET = '0x1111111111111111111111111111111111111111'

for (const perBatch of layouts) {
  await recreateDatabase(server, name)
  const url = databaseUrl(server, name)
  const sql = createSql(url, { max: 1 })
  try {
    await migrate(sql)
    await sql`INSERT INTO accounts (id, wallet_address, business_name, mode)
              VALUES ('acct_storage', ${WALLET}, 'storage', 'test')`
    await sql`INSERT INTO endpoints (id, account_id, upstream_url, price_atomic)
              VALUES ('ep_storage', 'acct_storage', 'http://127.0.0.1:1/', 1000)`
    await seedHistory(
      url,
      {
        accountId: 'acct_storage',
        wallet: WALLET,
        endpointId: 'ep_storage',
        payer: '0x2222222222222222222222222222222222222222',
        treasury: '0x3333333333333333333333333333333333333333',
      },
      { entries: rows, callsPerBatch: perBatch, log: () => {} },
    )
    const [s] = await sql<
      { calls: string; ledger: string; claims: string; entries: string; total: string }[]
    >`
      SELECT (SELECT sum(pg_total_relation_size(relid)) FROM pg_partition_tree('calls'))::text AS calls,
             (SELECT sum(pg_total_relation_size(relid)) FROM pg_partition_tree('claims'))::text AS claims,
             (SELECT sum(pg_total_relation_size(relid)) FROM pg_partition_tree('ledger_entries'))::text AS ledger,
             (SELECT count(*) FROM ledger_entries)::text AS entries,
             (SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c
               WHERE c.relkind = 'r' AND c.relnamespace = current_schema()::regnamespace)::text AS total`
    const perCall = (bytes: string) => Math.round(Number(bytes) / calls)
    // Every table (a partitioned one as the sum of its partitions) above 1 byte per call.
    const tables = await sql<{ name: string; bytes: string }[]>`
      SELECT coalesce(i.inhparent::regclass::text, c.relname) AS name, sum(pg_total_relation_size(c.oid))::text AS bytes
      FROM pg_class c LEFT JOIN pg_inherits i ON i.inhrelid = c.oid
      WHERE c.relkind = 'r' AND c.relnamespace = current_schema()::regnamespace
      GROUP BY 1 HAVING sum(pg_total_relation_size(c.oid)) > ${calls} ORDER BY 2 DESC`
    // Where a call row's bytes go: each column's average stored size, and each index of calls.
    const columns = await sql<{ name: string; type: string }[]>`
      SELECT attname AS name, format_type(atttypid, atttypmod) AS type FROM pg_attribute
      WHERE attrelid = 'calls'::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum`
    // (Column names come from the catalog, quoted.)
    const [widths] = await sql<Record<string, string>[]>`
      SELECT ${sql.unsafe(columns.map((c) => `avg(pg_column_size("${c.name}"))::numeric(8,1)::text AS "${c.name}"`).join(', '))}
      FROM calls`
    const [row] = await sql<
      { row: string }[]
    >`SELECT avg(pg_column_size(c.*))::numeric(8,1)::text AS row FROM calls c`
    const indexes = await sql<{ name: string; bytes: string }[]>`
      SELECT coalesce(pi.relname, ic.relname) AS name, sum(pg_relation_size(ic.oid))::text AS bytes
      FROM pg_index x JOIN pg_class ic ON ic.oid = x.indexrelid
      JOIN pg_partition_tree('calls') t ON t.relid = x.indrelid
      LEFT JOIN pg_inherits i ON i.inhrelid = ic.oid LEFT JOIN pg_class pi ON pi.oid = i.inhparent
      GROUP BY 1 ORDER BY 2 DESC`
    process.stdout.write(
      `  calls row ${row!.row} B (${columns.map((c) => `${c.name} ${c.type} ${widths![c.name] ?? 'null'}`).join(', ')})\n` +
        `  calls indexes per call: ${indexes.map((i) => `${i.name} ${perCall(i.bytes)}`).join(', ')}\n`,
    )
    process.stdout.write(
      `${perBatch === 0 ? 'per call' : `batches of ${perBatch}`}: ${calls.toLocaleString('en')} calls, ` +
        `${Number(s!.entries).toLocaleString('en')} entries; bytes per call: calls ${perCall(s!.calls)}, ` +
        `ledger_entries ${perCall(s!.ledger)}, all tables ${perCall(s!.total)} (as many MB per million calls); ` +
        `of which claims ${perCall(s!.claims)}, which leave a day at a time once below the horizon\n` +
        `  by table: ${tables.map((t) => `${t.name} ${perCall(t.bytes)}`).join(', ')}\n`,
    )
  } finally {
    await sql.end({ timeout: 5 })
    await dropDatabase(server, name)
  }
}
