// What the docs tests read of a Markdown page: its prose apart from its code blocks, and its links.

/** Text outside fenced code blocks, and the code blocks' own text. */
export function split(md: string): { prose: string; code: string } {
  const prose: string[] = []
  const code: string[] = []
  let fenced = false
  for (const line of md.split('\n')) {
    if (line.trimStart().startsWith('```')) fenced = !fenced
    else (fenced ? code : prose).push(line)
  }
  return { prose: prose.join('\n'), code: code.join('\n') }
}

export function links(md: string): string[] {
  // Inline code may hold brackets that are not links.
  const prose = split(md).prose.replace(/`[^`\n]*`/g, '``')
  return [...prose.matchAll(/\]\(([^)\s]+)\)/g)].map((m) => m[1]!)
}
