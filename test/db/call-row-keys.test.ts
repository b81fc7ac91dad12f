// The call row's compact keys (migrations 0059, 0060, 0062): a call's proof and payer are stored packed and
// read back as the same text, whatever the key; a receipt id derived from its call id is stored as '' and
// read back whole; rows written before keep their text and read the same.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { shownPayer } from '../../src/db/calls.ts'
import type { Sql } from '../../src/db/sql.ts'
import { migratedDatabase } from '../helpers/database.ts'

let db: Awaited<ReturnType<typeof migratedDatabase>>
let sql: Sql

beforeAll(async () => {
  db = await migratedDatabase({ max: 1 })
  sql = db.sql
})
afterAll(async () => {
  await db?.stop()
})

const hex = (n: number, seed: string) => seed.repeat(n).slice(0, n)

describe('call row keys', () => {
  it('packs each shape of proof key into fewer bytes and reads back the same text', async () => {
    const keys = [
      // transaction hash
      [`tx:0x${hex(64, 'a1b2c3')}`, 33],
      // x402 exact (auth:chain:token:payer:nonce)
      [`auth:84532:0x${hex(40, '036cbd')}:0x${hex(40, 'f39fd6')}:0x${hex(64, '9e8d')}`, 81],
      [`auth:8453:0x${hex(40, '833589')}:0x${hex(40, '70997970')}:0x${'0'.repeat(64)}`, 81],
      // upto (payer:decimal nonce)
      [
        `upto:0x${hex(40, 'abcdef')}:115792089237316195423570985008687907853269984665640564039457584007913129639935`,
        99,
      ],
      [`upto:0x${hex(40, '12')}:0`, 22],
    ] as const
    for (const [key, bytes] of keys) {
      const [r] = await sql<{ back: string; n: number }[]>`
        SELECT proof_key_of(proof_packed(${key})) AS back, length(proof_packed(${key}))::int AS n`
      expect(r).toEqual({ back: key, n: bytes })
      expect(bytes).toBeLessThan(key.length)
    }
  })

  it('keeps any other key as its text: never a different key', async () => {
    const others = [
      `tx:0x${hex(64, 'AB')}`, // upper-case hex is not what the service makes: kept as text
      `tx:0x${hex(63, 'ab')}`,
      `auth:0:0x${hex(40, 'ab')}:0x${hex(40, 'cd')}:0x${hex(64, 'ef')}`,
      `auth:84532:0x${hex(40, 'ab')}:0x${hex(40, 'cd')}:0x${hex(64, 'ef')}:extra`,
      `upto:0x${hex(40, 'ab')}:01`,
      `batch:ch_1:1000`,
      'siwx:nonce-é-ü',
      'odd\\key\\x41\\101',
      '',
    ]
    for (const key of others) {
      // Its bytes as UTF-8 (what convert_to gave before migration 0063), and the same text back.
      const [r] = await sql<{ back: string; tag: number; utf8: boolean }[]>`
        SELECT proof_key_of(proof_packed(${key})) AS back, get_byte(proof_packed(${key}), 0) AS tag,
               proof_packed(${key}) = '\\x00'::bytea || convert_to(${key}, 'UTF8') AS utf8`
      expect(r).toEqual({ back: key, tag: 0, utf8: true })
    }
    const [none] = await sql<{ proof: Buffer | null; payer: Buffer | null }[]>`
      SELECT proof_packed(NULL) AS proof, payer_packed(NULL) AS payer`
    expect(none).toEqual({ proof: null, payer: null })
  })

  it('packs in place: the planner inlines both packings, no function call per row', async () => {
    const plan = await sql<{ 'QUERY PLAN': string }[]>`
      EXPLAIN (VERBOSE, COSTS OFF)
      SELECT proof_packed(proof_key), payer_packed(payer) FROM claims`
    const text = plan.map((r) => r['QUERY PLAN']).join('\n')
    expect(text).not.toMatch(/proof_packed|payer_packed/)
    expect(text).toMatch(/decode/)
  })

  it('packs an address payer into its 20 bytes and keeps any other payer as text', async () => {
    const address = '0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266'
    const [r] = await sql<{ n: number; back: string; other: Buffer | null }[]>`
      SELECT length(payer_packed(${address}))::int AS n,
             call_payer(NULL, payer_packed(${address})) AS back, payer_packed('0xnot-an-address') AS other`
    expect(r).toEqual({ n: 20, back: address.toLowerCase(), other: null })
    expect(shownPayer(r!.back)).toBe(address)
    expect(shownPayer('someone')).toBe('someone')
  })

  it('reads a call written either way, and each row holds one form of its proof', async () => {
    const txKey = `tx:0x${hex(64, '5e')}`
    await sql`
      INSERT INTO calls (id, proof, endpoint_id, account_id, payer, amount_atomic, owner_share_atomic,
                         fee_atomic, upstream_status, method, receipt_id)
      VALUES ('call_PACKED00000000000', proof_packed(${txKey}), 'ep_k', 'acct_k', '0xpayer', 100, 95, 5, 200,
              'GET', call_receipt_stored('call_PACKED00000000000', 'rcpt_PACKED00000000000'))`
    const rows = await sql<{ id: string; key: string; receipt: string | null; stored: string | null }[]>`
      SELECT id, call_proof_key(proof_key, proof) AS key, call_receipt_id(id, receipt_id) AS receipt,
             receipt_id AS stored
      FROM calls WHERE account_id = 'acct_k' ORDER BY id`
    expect(rows).toEqual([
      { id: 'call_PACKED00000000000', key: txKey, receipt: 'rcpt_PACKED00000000000', stored: '' },
    ])
    // Both forms, or neither: refused.
    const forms: Array<[string | null, string | null]> = [
      [txKey, txKey],
      [null, null],
    ]
    for (const [text, packed] of forms) {
      await expect(sql`
        INSERT INTO calls (id, proof_key, proof, endpoint_id, account_id, payer, amount_atomic,
                           owner_share_atomic, fee_atomic, upstream_status, method)
        VALUES ('call_BAD00000000000000', ${text}, proof_packed(${packed}), 'ep_k', 'acct_k', '0xp', 1, 1, 0, 200,
                'GET')`).rejects.toThrow(/calls_proof_once/)
    }
    // Written before: its text, and its receipt id stored whole (or none).
    await sql`
      INSERT INTO calls (id, proof_key, endpoint_id, account_id, payer, amount_atomic, owner_share_atomic,
                         fee_atomic, upstream_status, method, receipt_id)
      VALUES ('call_OLD00000000000000', ${txKey}, 'ep_o', 'acct_o', '0xpayer', 100, 95, 5, 200, 'GET',
              'rcpt_OLD00000000000000'),
             ('call_NONE0000000000000', 'tx:none', 'ep_o', 'acct_o', '0xpayer', 100, 95, 5, 200, 'PASS', NULL)`
    const old = await sql<{ key: string; receipt: string | null }[]>`
      SELECT call_proof_key(proof_key, proof) AS key, call_receipt_id(id, receipt_id) AS receipt
      FROM calls WHERE account_id = 'acct_o' ORDER BY id DESC`
    expect(old).toEqual([
      { key: txKey, receipt: 'rcpt_OLD00000000000000' },
      { key: 'tx:none', receipt: null },
    ])
  })
})
