// The transition table is the whole money: every function it names is declared in src/books/, each
// transition's SQL (in that function or the books functions it calls) names the state it starts from (or the
// table's `where` precondition), and every exported books function that writes is reached from the table.
import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import ts from 'typescript'
import { describe, expect, it } from 'vitest'
import { TRANSITIONS, type Transition } from '../../src/books/transitions.ts'

const BOOKS = join(import.meta.dirname, '../../src/books')
// Writes that change no money state: the last broadcast error of a payout, kept for operators; the sign-in
// message of a draw whose answer was lost, spent so that the draw cannot commit after it was looked for.
const NOT_MONEY = new Set(['recordBroadcastError', 'findOwnDraw'])

interface Fn {
  body: string
  exported: boolean
}

function booksFunctions(): Map<string, Fn> {
  const fns = new Map<string, Fn>()
  for (const file of readdirSync(BOOKS).filter((f) => f.endsWith('.ts'))) {
    const text = readFileSync(join(BOOKS, file), 'utf8')
    const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true)
    for (const node of source.statements) {
      if (!ts.isFunctionDeclaration(node) || !node.name) continue
      const exported = node.modifiers?.some((m) => m.kind === ts.SyntaxKind.ExportKeyword) ?? false
      fns.set(node.name.text, { body: node.getText(source), exported })
    }
  }
  return fns
}

const fns = booksFunctions()

const calls = new Map(
  [...fns].map(([name, f]) => [
    name,
    [...fns.keys()].filter((o) => o !== name && new RegExp(`\\b${o}\\(`).test(f.body)),
  ]),
)

/** The names of a function and of every books function it calls, transitively. */
function reach(name: string, seen = new Set<string>()): Set<string> {
  if (seen.has(name)) return seen
  seen.add(name)
  for (const other of calls.get(name) ?? []) reach(other, seen)
  return seen
}

/** A function's text and that of every books function it calls; query parameters (`${…}`) read as `?`. */
function closure(name: string): string {
  return [...reach(name)]
    .map((n) => fns.get(n)?.body ?? '')
    .join('\n')
    .replace(/\$\{[^}]*\}/g, '?')
}

function precondition(t: Transition): string {
  return t.where ?? `'${t.from}'`
}

const WRITES = /INSERT INTO|UPDATE [a-z_]+(?: [a-z])? SET|DELETE FROM/

describe('the transition table', () => {
  it('names only functions declared in src/books/', () => {
    expect(TRANSITIONS.map((t) => t.fn).filter((fn) => !fns.has(fn))).toEqual([])
  })

  it("each transition's SQL names the state it starts from; a creation inserts", () => {
    const missing: string[] = []
    for (const t of TRANSITIONS) {
      const text = closure(t.fn)
      if (t.from === null) {
        if (!/INSERT INTO/.test(text)) missing.push(`${t.record} ∅ → ${t.to} (${t.fn}): no INSERT`)
        // A creation's own precondition (the payer reservation) is named as written, as any other's.
        if (t.where !== undefined && !text.includes(t.where))
          missing.push(`${t.record} ∅ → ${t.to} (${t.fn}): no ${t.where}`)
      } else if (!text.includes(precondition(t))) {
        missing.push(`${t.record} ${t.from} → ${t.to} (${t.fn}): no ${precondition(t)}`)
      }
    }
    expect(missing).toEqual([])
  })

  it('covers payments, checkout figures, inflows, channels, passes and facilitator settlements beside claims, calls, entries, payouts', () => {
    expect(new Set(TRANSITIONS.map((t) => t.record))).toEqual(
      new Set([
        'claim',
        'call',
        'ledger_entry',
        'payout',
        'payment',
        'checkout_figure',
        'refund',
        'unmatched_inflow',
        'channel',
        'channel_op',
        'channel_claim',
        'pass',
        'facilitator_settlement',
      ]),
    )
  })

  it('every exported books function that writes is in the table or called by a function in it', () => {
    const reached = new Set(TRANSITIONS.flatMap((t) => [...reach(t.fn)]))
    const strays = [...fns]
      .filter(([name, f]) => f.exported && WRITES.test(f.body) && !reached.has(name) && !NOT_MONEY.has(name))
      .map(([name]) => name)
    expect(strays).toEqual([])
  })

  it('a transition whose SQL does not name its state is found (the check can fail)', () => {
    const wrong: Transition = {
      record: 'payout',
      from: 'confirmed',
      to: 'failed',
      fn: 'failPayout',
      why: 'x',
    }
    expect(closure(wrong.fn).includes(precondition(wrong))).toBe(false)
    expect(fns.has('replacePayoutTx')).toBe(false)
  })
})
