// The house has floors and no stairs going up. Every import of src/ and bench/ (type-only ones included) is
// read with TypeScript's own pre-processor (ts.preProcessFile: import/export-from/dynamic import) and
// resolved to a file; then: the data plane and the control plane never import each other, directly or
// through other files; the data plane never imports checkout (which is built on top of it); leaves import
// nothing of ours; and the graph has no circle (Tarjan's strongly connected components).
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs'
import { dirname, join, relative, resolve } from 'node:path'
import ts from 'typescript'
import { describe, expect, it } from 'vitest'

const ROOT = join(import.meta.dirname, '../..')

function files(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name)
    if (statSync(path).isDirectory()) return name === 'node_modules' ? [] : files(path)
    return /\.(ts|mts)$/.test(name) && !name.endsWith('.d.ts') ? [path] : []
  })
}

/** file (relative to the root) → the files of ours it imports (relative to the root). */
function importGraph(roots: string[]): Map<string, string[]> {
  const graph = new Map<string, string[]>()
  for (const file of roots.flatMap((r) => files(join(ROOT, r)))) {
    const info = ts.preProcessFile(readFileSync(file, 'utf8'), true, true)
    const targets = info.importedFiles
      .map((f) => f.fileName)
      .filter((spec) => spec.startsWith('.'))
      .map((spec) => resolve(dirname(file), spec))
      .filter((path) => existsSync(path))
      .map((path) => relative(ROOT, path))
    graph.set(relative(ROOT, file), [...new Set(targets)])
  }
  return graph
}

/** Strongly connected components of more than one file, or a file importing itself. */
function circles(graph: Map<string, string[]>): string[][] {
  let index = 0
  const idx = new Map<string, number>()
  const low = new Map<string, number>()
  const stack: string[] = []
  const on = new Set<string>()
  const out: string[][] = []
  const visit = (v: string) => {
    idx.set(v, index)
    low.set(v, index++)
    stack.push(v)
    on.add(v)
    for (const w of graph.get(v) ?? []) {
      if (!idx.has(w)) {
        visit(w)
        low.set(v, Math.min(low.get(v)!, low.get(w)!))
      } else if (on.has(w)) low.set(v, Math.min(low.get(v)!, idx.get(w)!))
    }
    if (low.get(v) === idx.get(v)) {
      const scc: string[] = []
      let w: string
      do {
        w = stack.pop()!
        on.delete(w)
        scc.push(w)
      } while (w !== v)
      if (scc.length > 1 || graph.get(v)?.includes(v)) out.push(scc.sort())
    }
  }
  for (const v of graph.keys()) if (!idx.has(v)) visit(v)
  return out
}

function reachable(graph: Map<string, string[]>, from: string): Set<string> {
  const seen = new Set<string>()
  const todo = [from]
  while (todo.length) {
    for (const w of graph.get(todo.pop()!) ?? []) {
      if (!seen.has(w)) {
        seen.add(w)
        todo.push(w)
      }
    }
  }
  return seen
}

/** Imports from files under `from` that reach files under `to` (directly, or through others when deep). */
function crossings(graph: Map<string, string[]>, from: string, to: string, deep: boolean): string[] {
  const found: string[] = []
  for (const [file, targets] of graph) {
    if (!file.startsWith(from)) continue
    const reached = deep ? reachable(graph, file) : new Set(targets)
    for (const t of reached) if (t.startsWith(to)) found.push(`${file} → ${t}`)
  }
  return found
}

const graph = importGraph(['src', 'bench'])

describe('imports', () => {
  it('reads the imports of every file (type-only included)', () => {
    expect(graph.get('src/service.ts')).toContain('src/data-plane/start.ts')
    expect(graph.get('src/checkout/pay.ts')).toContain('src/checkout/context.ts')
  })

  it('the data plane and the control plane never import each other, not even through other files', () => {
    expect(crossings(graph, 'src/data-plane/', 'src/control-plane/', true)).toEqual([])
    expect(crossings(graph, 'src/control-plane/', 'src/data-plane/', true)).toEqual([])
  })

  it('schemes and the wire format sit below the data plane: they never import it, not even through other files', () => {
    expect(crossings(graph, 'src/schemes/', 'src/data-plane/', true)).toEqual([])
    expect(crossings(graph, 'src/wire/', 'src/data-plane/', true)).toEqual([])
  })

  it('the data plane does not import checkout, which is built on top of it (service.ts hands it over)', () => {
    expect(crossings(graph, 'src/data-plane/', 'src/checkout/', true)).toEqual([])
  })

  it('leaves import nothing of ours but other leaves', () => {
    const leaves = ['src/money.ts', 'src/ids.ts', 'src/errors.ts']
    for (const leaf of leaves) {
      expect(graph.get(leaf)?.filter((t) => !leaves.includes(t) && !t.startsWith('src/config/'))).toEqual([])
    }
  })

  it('no import circle in src/ or bench/', () => {
    expect(circles(graph)).toEqual([])
  })

  it('finds a circle and a crossing when there is one (the checks can fail)', () => {
    const g = new Map([
      ['src/data-plane/a.ts', ['src/x.ts']],
      ['src/x.ts', ['src/control-plane/b.ts']],
      ['src/control-plane/b.ts', ['src/y.ts']],
      ['src/y.ts', ['src/control-plane/b.ts']],
    ])
    expect(crossings(g, 'src/data-plane/', 'src/control-plane/', true)).toEqual([
      'src/data-plane/a.ts → src/control-plane/b.ts',
    ])
    expect(crossings(g, 'src/data-plane/', 'src/control-plane/', false)).toEqual([])
    expect(circles(g)).toEqual([['src/control-plane/b.ts', 'src/y.ts']])
  })
})
