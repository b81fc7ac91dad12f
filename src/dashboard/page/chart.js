// Revenue per day as an inline SVG bar chart, built with DOM calls (no library, no inline style: geometry is
// in SVG attributes and colours in dashboard.css, so the page's CSP needs no 'unsafe-inline').
const NS = 'http://www.w3.org/2000/svg'
const H = 220
const PAD = { top: 12, right: 8, bottom: 26, left: 56 }

function el(name, attrs, text) {
  const node = document.createElementNS(NS, name)
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v))
  if (text !== undefined) node.textContent = text
  return node
}

/** Rounds the top of the axis up to 1, 2 or 5 × a power of ten. */
function niceMax(x) {
  if (x <= 0) return 1
  const p = 10 ** Math.floor(Math.log10(x))
  for (const m of [1, 2, 5, 10]) if (m * p >= x) return m * p
  return 10 * p
}

/**
 * days: [{date: 'YYYY-MM-DD', amount: number, calls, payments}], amounts in dollars.
 * format(amount) → a label. The whole chart is one image with a title and a text summary; every bar also
 * has its own title (the exact figure on hover).
 */
export function bars(container, days, format) {
  // Drawn at the container's own width, so its text keeps its size on a phone (redrawn on resize).
  const W = Math.max(300, Math.round(container.clientWidth || 720))
  container.textContent = ''
  const total = days.reduce((s, d) => s + d.amount, 0)
  const peak = days.reduce((m, d) => (d.amount > m.amount ? d : m), days[0] || { amount: 0, date: '' })
  const svg = el('svg', {
    viewBox: `0 0 ${W} ${H}`,
    role: 'img',
    'aria-labelledby': 'chart-title chart-desc',
    preserveAspectRatio: 'xMidYMid meet',
  })
  svg.append(el('title', { id: 'chart-title' }, 'Revenue per day'))
  svg.append(
    el(
      'desc',
      { id: 'chart-desc' },
      days.length === 0
        ? 'No days in range.'
        : `${days.length} days from ${days[0].date} to ${days[days.length - 1].date}: ${format(total)} in total` +
            (peak.amount > 0 ? `, highest ${format(peak.amount)} on ${peak.date}.` : '.'),
    ),
  )
  const innerW = W - PAD.left - PAD.right
  const innerH = H - PAD.top - PAD.bottom
  const top = niceMax(peak.amount)
  for (const f of [0, 0.5, 1]) {
    const y = PAD.top + innerH * (1 - f)
    svg.append(el('line', { class: 'axis', x1: PAD.left, x2: W - PAD.right, y1: y, y2: y }))
    svg.append(
      el('text', { class: 'label', x: PAD.left - 6, y: y + 4, 'text-anchor': 'end' }, format(top * f)),
    )
  }
  const step = innerW / Math.max(days.length, 1)
  const barW = Math.max(2, step * 0.7)
  days.forEach((d, i) => {
    const h = top > 0 ? (d.amount / top) * innerH : 0
    const x = PAD.left + i * step + (step - barW) / 2
    const rect = el('rect', {
      class: 'bar',
      x: x.toFixed(1),
      y: (PAD.top + innerH - h).toFixed(1),
      width: barW.toFixed(1),
      height: Math.max(h, d.amount > 0 ? 1 : 0).toFixed(1),
      'data-date': d.date,
    })
    rect.append(el('title', {}, `${d.date}: ${format(d.amount)} (${d.calls} calls, ${d.payments} payments)`))
    svg.append(rect)
    // A date under the first bar and every seventh bar counted back from the last (not crowding the first).
    const fromEnd = days.length - 1 - i
    if (i === 0 || (fromEnd % 7 === 0 && i >= 4)) {
      // The last date ends at its bar's right edge, so it is never cut off.
      const anchor = fromEnd === 0 ? 'end' : 'middle'
      const at = fromEnd === 0 ? Math.min(x + barW, W - 2) : x + barW / 2
      svg.append(
        el('text', { class: 'label', x: at.toFixed(1), y: H - 8, 'text-anchor': anchor }, d.date.slice(5)),
      )
    }
  })
  if (total === 0)
    svg.append(
      el(
        'text',
        { class: 'empty', x: PAD.left + innerW / 2, y: PAD.top + innerH / 2, 'text-anchor': 'middle' },
        'No revenue yet',
      ),
    )
  container.append(svg)
  container.chartArgs = [days, format]
}

let resizeTimer = null
window.addEventListener('resize', () => {
  clearTimeout(resizeTimer)
  resizeTimer = setTimeout(() => {
    for (const c of document.querySelectorAll('.chart'))
      if (c.chartArgs && c.offsetParent) bars(c, ...c.chartArgs)
  }, 100)
})
