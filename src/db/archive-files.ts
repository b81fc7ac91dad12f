// Archive files of month partitions: a partition streamed out by COPY (text format) through gzip into one
// file, fsync'd, then read back whole to check its checksum and row count before anything may be dropped;
// and the month's manifest.json, which `npm run archive -- --verify` re-checks later.
import { createHash } from 'node:crypto'
import { createReadStream, createWriteStream, existsSync, readdirSync, readFileSync } from 'node:fs'
import { mkdir, open, rename, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { Transform } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { createGunzip, createGzip } from 'node:zlib'
import type { Sql } from './sql.ts'

export interface ArchivedFile {
  table: string
  month: string
  /** The file's name inside the month's directory. */
  file: string
  rows: number
  bytes: number
  sha256: string
  /** The columns of each line, in order (COPY text format: tab-separated, \N for null). */
  columns: string[]
}

export interface Manifest {
  month: string
  /** The last migration applied when the month was archived: the columns' meaning at that time. */
  schema_version: string
  archived_at: string
  files: ArchivedFile[]
  /** The month's ledger entries summed per account, kind, wallet and payout (what the books carry forward). */
  ledger_sums: Array<{
    account_id: string | null
    kind: string
    wallet: string | null
    payout_id: string | null
    entries: string
    amount_atomic: string
  }>
}

/** Counts the bytes and lines passing through, and hashes them. */
function meter(hash: ReturnType<typeof createHash> | null) {
  const m = { bytes: 0, lines: 0 }
  const t = new Transform({
    transform(chunk: Buffer, _enc, done) {
      m.bytes += chunk.length
      hash?.update(chunk)
      for (let i = chunk.indexOf(10); i !== -1; i = chunk.indexOf(10, i + 1)) m.lines++
      done(null, chunk)
    },
  })
  return { m, t }
}

/**
 * Streams partition `name` of `table` into `dir/<table>.tsv.gz` (written to a .part file, fsync'd, then
 * renamed), then reads the file back: its sha256 and its row count must match what was written and
 * `expectRows`. Throws if not; the caller drops nothing then.
 */
export async function exportPartition(
  sql: Sql,
  q: { table: string; name: string; month: string; dir: string; expectRows: number },
): Promise<ArchivedFile> {
  await mkdir(q.dir, { recursive: true })
  const file = `${q.table}.tsv.gz`
  const path = join(q.dir, file)
  const columns = (
    await sql<{ name: string }[]>`
      SELECT attname AS name FROM pg_attribute
      WHERE attrelid = ${q.table}::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum`
  ).map((r) => r.name)
  const hash = createHash('sha256')
  const rows = meter(null)
  const out = meter(hash)
  await pipeline(
    copyLines(sql, q.name, columns),
    rows.t,
    createGzip({ level: 6 }),
    out.t,
    createWriteStream(`${path}.part`),
  )
  const fd = await open(`${path}.part`, 'r+')
  await fd.sync()
  await fd.close()
  await rename(`${path}.part`, path)
  await syncDir(q.dir)
  const sha256 = hash.digest('hex')
  const check = await readBack(path)
  if (check.sha256 !== sha256 || check.bytes !== out.m.bytes) {
    throw new Error(`${path}: read back differs from what was written (sha256 ${check.sha256} ≠ ${sha256})`)
  }
  if (check.rows !== q.expectRows || rows.m.lines !== q.expectRows) {
    throw new Error(`${path}: ${check.rows} rows read back, ${q.expectRows} in ${q.name}`)
  }
  return { table: q.table, month: q.month, file, rows: check.rows, bytes: check.bytes, sha256, columns }
}

/** Rows read per round trip while a partition is exported. */
const EXPORT_BATCH = 10_000

/**
 * The rows of `name` as COPY text-format lines (tab-separated, \N for null, backslash, tab, newline and
 * carriage return escaped), so `\copy <table> (<columns>) FROM …` restores them. Built in SQL and read by
 * a cursor rather than streamed by COPY … TO STDOUT: the driver (postgres 3.4.9) leaves its connection
 * hanging after a large COPY stream consumed through a slower pipe (gzip), and the next query never runs.
 * Column order stated, so a column added to the table later cannot shift a restored line.
 */
async function* copyLines(sql: Sql, name: string, columns: string[]): AsyncGenerator<Buffer> {
  const field = (c: string) =>
    `coalesce(replace(replace(replace(replace(${quoteIdent(c)}::text, '\\', '\\\\'), E'\t', '\\t'), E'\n', '\\n'), E'\r', '\\r'), '\\N')`
  const line = columns.map(field).join(" || E'\\t' || ")
  const cursor = sql.unsafe(`SELECT ${line} || E'\\n' AS line FROM ${quoteIdent(name)}`).cursor(EXPORT_BATCH)
  for await (const batch of cursor as AsyncIterable<Array<{ line: string }>>) {
    yield Buffer.from(batch.map((r) => r.line).join(''))
  }
}

function quoteIdent(name: string): string {
  return `"${name.replaceAll('"', '""')}"`
}

/** A file's sha256 and size, and the number of lines of its gunzipped content. */
export async function readBack(path: string): Promise<{ sha256: string; bytes: number; rows: number }> {
  const hash = createHash('sha256')
  const raw = meter(hash)
  const lines = meter(null)
  await pipeline(createReadStream(path), raw.t, createGunzip(), lines.t, async (s: AsyncIterable<Buffer>) => {
    for await (const _ of s);
  })
  return { sha256: hash.digest('hex'), bytes: raw.m.bytes, rows: lines.m.lines }
}

async function syncDir(dir: string): Promise<void> {
  const fd = await open(dir, 'r')
  try {
    await fd.sync()
  } finally {
    await fd.close()
  }
}

/** Writes `dir/manifest.json` durably (temporary file, fsync, rename). */
export async function writeManifest(dir: string, manifest: Manifest): Promise<void> {
  const path = join(dir, 'manifest.json')
  await writeFile(`${path}.part`, `${JSON.stringify(manifest, null, 2)}\n`)
  const fd = await open(`${path}.part`, 'r+')
  await fd.sync()
  await fd.close()
  await rename(`${path}.part`, path)
  await syncDir(dir)
}

export interface VerifyResult {
  ok: boolean
  checked: number
  problems: string[]
}

/**
 * Re-checks every file a manifest names (its sha256, size and row count): `dir` is one month's directory,
 * or the archive root holding one directory per month.
 */
export async function verifyArchive(dir: string): Promise<VerifyResult> {
  const months = existsSync(join(dir, 'manifest.json'))
    ? [dir]
    : readdirSync(dir, { withFileTypes: true })
        .filter((d) => d.isDirectory() && existsSync(join(dir, d.name, 'manifest.json')))
        .map((d) => join(dir, d.name))
  const problems: string[] = []
  let checked = 0
  if (months.length === 0) problems.push(`${dir}: no manifest.json here or in its month directories`)
  for (const m of months) {
    const manifest = JSON.parse(readFileSync(join(m, 'manifest.json'), 'utf8')) as Manifest
    for (const f of manifest.files) {
      const path = join(m, f.file)
      checked++
      if (!existsSync(path)) {
        problems.push(`${path}: missing`)
        continue
      }
      try {
        const r = await readBack(path)
        if (r.sha256 !== f.sha256) problems.push(`${path}: sha256 ${r.sha256} ≠ manifest ${f.sha256}`)
        else if (r.bytes !== f.bytes) problems.push(`${path}: ${r.bytes} bytes ≠ manifest ${f.bytes}`)
        else if (r.rows !== f.rows) problems.push(`${path}: ${r.rows} rows ≠ manifest ${f.rows}`)
      } catch (err) {
        problems.push(`${path}: unreadable (${(err as Error).message})`)
      }
    }
  }
  return { ok: problems.length === 0, checked, problems }
}
