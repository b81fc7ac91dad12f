// House rule: no function in src/ longer than 100 lines unless a comment at its top says why it must be one
// piece. Measured with the TypeScript compiler on every function, method, arrow and accessor body, in the
// TypeScript and in the browser code (the pages' .js files) alike.
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, relative } from 'node:path'
import ts from 'typescript'
import { describe, expect, it } from 'vitest'

const MAX_LINES = 100
const root = join(import.meta.dirname, '..')
// The why-comment that allows a longer function: in a comment just above it (or its statement), or as the
// first thing inside its body, e.g. `// One piece: …`.
const ONE_PIECE = /one piece/i

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const path = join(dir, e.name)
    if (e.isDirectory()) return sourceFiles(path)
    return (e.name.endsWith('.ts') && !e.name.endsWith('.d.ts')) || e.name.endsWith('.js') ? [path] : []
  })
}

/** Comments right above the node, or above the statement that declares it (`const f = () => …`). */
function leadingComments(text: string, node: ts.Node): string {
  let holder: ts.Node = node
  while (
    holder.parent &&
    (ts.isVariableDeclaration(holder.parent) ||
      ts.isVariableDeclarationList(holder.parent) ||
      ts.isVariableStatement(holder.parent) ||
      ts.isPropertyAssignment(holder.parent) ||
      ts.isPropertyDeclaration(holder.parent) ||
      ts.isExportAssignment(holder.parent))
  )
    holder = holder.parent
  const ranges = ts.getLeadingCommentRanges(text, holder.getFullStart()) ?? []
  return ranges.map((r) => text.slice(r.pos, r.end)).join('\n')
}

function firstBodyComment(text: string, body: ts.Node): string {
  const open = body.getStart() + 1
  const ranges = ts.getLeadingCommentRanges(text, open) ?? []
  return ranges.map((r) => text.slice(r.pos, r.end)).join('\n')
}

function longFunctions(files: string[]): string[] {
  const found: string[] = []
  for (const file of files) {
    const text = readFileSync(file, 'utf8')
    const kind = file.endsWith('.js') ? ts.ScriptKind.JS : ts.ScriptKind.TS
    const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true, kind)
    const visit = (node: ts.Node) => {
      if (ts.isFunctionLike(node) && 'body' in node && node.body && ts.isBlock(node.body)) {
        const start = source.getLineAndCharacterOfPosition(node.body.getStart()).line
        const end = source.getLineAndCharacterOfPosition(node.body.getEnd()).line
        const lines = end - start + 1
        if (
          lines > MAX_LINES &&
          !ONE_PIECE.test(leadingComments(text, node)) &&
          !ONE_PIECE.test(firstBodyComment(text, node.body))
        ) {
          const name = (node as ts.FunctionDeclaration).name?.getText(source) ?? '(anonymous)'
          found.push(`${relative(root, file)}:${start + 1} ${name}: ${lines} lines`)
        }
      }
      ts.forEachChild(node, visit)
    }
    visit(source)
  }
  return found
}

describe('function length', () => {
  it('no function in src/ is over 100 lines without a comment saying why it is one piece', () => {
    const files = sourceFiles(join(root, 'src'))
    expect(files.some((f) => f.endsWith('.js'))).toBe(true)
    expect(longFunctions(files)).toEqual([])
    // Parsing every file of src/ takes ~2 s alone and over 10 s on two cores shared with a test run.
  }, 30_000)

  it('finds a long function in browser code too (the check can fail)', () => {
    const dir = mkdtempSync(join(tmpdir(), 'function-length-'))
    try {
      const body = Array.from({ length: MAX_LINES + 1 }, (_, i) => `  const a${i} = ${i}`).join('\n')
      writeFileSync(join(dir, 'page.js'), `;(() => {\n${body}\n})()\n`)
      expect(longFunctions(sourceFiles(dir))).toHaveLength(1)
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })
})
