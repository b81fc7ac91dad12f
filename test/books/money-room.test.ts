// Every statement that changes money stands in src/books/: a scan of src/ fails on any stray one.
import { readdirSync, readFileSync, statSync } from 'node:fs'
import { join, relative } from 'node:path'
import { describe, expect, it } from 'vitest'

const ROOT = join(import.meta.dirname, '..', '..')
const SRC = join(ROOT, 'src')

const MONEY_TABLES = [
  'claims',
  'calls',
  'ledger_entries',
  'payouts',
  'payout_accounts',
  'payments',
  'payment_timeline',
  'refunds',
  'unmatched_inflows',
  // Running balances (migration 0011): written only by the triggers on ledger_entries and payouts.
  'account_balances',
  'wallet_balances',
  // x402 batch-settlement channels
  'batch_channels',
  'batch_channel_ops',
  'batch_claims',
  // Passes: bought with a captured call, drawn per signed-in call (src/books/passes.ts).
  'passes',
]

/** Files allowed to write money tables outside src/books/: none left (payments and settlement moved in). */
const NOT_MOVED_YET = new Set<string>()
const WRITE = new RegExp(
  String.raw`\b(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM|TRUNCATE(?:\s+TABLE)?)\s+(?:ONLY\s+)?(${MONEY_TABLES.join('|')})\b`,
  'gi',
)

/** The money writes in a source text: `table` and line. */
function moneyWrites(text: string): Array<{ table: string; line: number }> {
  const out: Array<{ table: string; line: number }> = []
  for (const m of text.matchAll(WRITE)) {
    out.push({ table: m[1]!.toLowerCase(), line: text.slice(0, m.index).split('\n').length })
  }
  return out
}

function tsFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name)
    if (statSync(path).isDirectory()) return tsFiles(path)
    return path.endsWith('.ts') ? [path] : []
  })
}

describe('the money room', () => {
  it('the scanner finds a money write however it is spelled (it can fail)', () => {
    const sample = [
      'await sql`UPDATE claims SET status = $1`',
      'await tx`insert  into ledger_entries (kind) VALUES (1)`',
      'db`DELETE FROM payouts WHERE id = 1`',
      'db`SELECT 1 FROM claims FOR UPDATE OF c`',
      "db`INSERT INTO webhooks (id) VALUES ('x')`",
    ].join('\n')
    expect(moneyWrites(sample)).toEqual([
      { table: 'claims', line: 1 },
      { table: 'ledger_entries', line: 2 },
      { table: 'payouts', line: 3 },
    ])
  })

  it('no INSERT/UPDATE/DELETE on a money table stands outside src/books/', () => {
    const strays: string[] = []
    for (const file of tsFiles(SRC)) {
      const rel = relative(ROOT, file)
      if (rel.startsWith('src/books/') || NOT_MOVED_YET.has(rel)) continue
      for (const w of moneyWrites(readFileSync(file, 'utf8')))
        strays.push(`${rel}:${w.line} writes ${w.table}`)
    }
    expect(strays).toEqual([])
  })

  it('src/books/ holds the writes of every money table it owns', () => {
    const tables = new Set(
      tsFiles(join(SRC, 'books')).flatMap((f) => moneyWrites(readFileSync(f, 'utf8')).map((w) => w.table)),
    )
    for (const t of ['claims', 'calls', 'ledger_entries', 'payouts', 'payout_accounts'])
      expect(tables).toContain(t)
  })
})
