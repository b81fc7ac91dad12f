// Endpoints: create, edit pricing (fixed, rules or usage), disable / enable.
import { act, api, endpointNames, onSubmit } from './api.js'
import { $, copy, emptyRow, flash, h, rowButton, statusBadge, td } from './dom.js'
import { formError, pricingEditor, pricingSummary } from './pricing-editor.js'

const createPricing = pricingEditor($('ep-pricing'), 'ep')
createPricing.fill({ model: 'fixed' })
const editPricing = pricingEditor($('price-pricing'), 'edit')

function endpointRow(e) {
  const label = e.name || e.id
  const toggle = e.status === 'active' ? 'Disable' : 'Enable'
  const setStatus = (ev) =>
    act(ev.currentTarget, async () => {
      const status = e.status === 'active' ? 'disabled' : 'active'
      await api(`/endpoints/${e.id}`, { method: 'PATCH', body: { status } })
      await loadEndpoints()
      flash(`${label} is ${status}`)
    })
  return h(
    'tr',
    { dataset: { id: e.id } },
    td('Name', label),
    td(
      'Metered URL',
      h(
        'span',
        {},
        h('span', { class: 'mono', text: e.metered_url }),
        ' ',
        rowButton('Copy', `Copy metered URL of ${label}`, () => copy(e.metered_url, 'Metered URL')),
      ),
    ),
    td('Pricing', pricingSummary(e)),
    td('Status', statusBadge(e.status)),
    td(
      'Actions',
      h(
        'div',
        { class: 'row-actions' },
        rowButton('Edit pricing', `Edit pricing of ${label}`, () => editPrice(e)),
        rowButton(toggle, `${toggle} ${label}`, setStatus, e.status === 'active' ? 'small danger' : 'small'),
      ),
      'actions-cell',
    ),
  )
}

export async function loadEndpoints() {
  const list = await endpointNames()
  const body = $('endpoints-body')
  if (list.length === 0) return emptyRow(body, 5, 'No endpoints yet: create one above.')
  body.replaceChildren(...list.map(endpointRow))
}

onSubmit(
  'endpoint-form',
  async (form) => {
    const body = { upstream_url: $('ep-upstream').value.trim(), pricing: createPricing.read() }
    const name = $('ep-name').value.trim()
    if (name) body.name = name
    let created
    try {
      created = await api('/endpoints', { method: 'POST', body, idempotent: true })
    } catch (err) {
      formError(form, $('ep-error'), err)
      throw err
    }
    formError(form, $('ep-error'), null)
    form.reset()
    createPricing.fill({ model: 'fixed' })
    await loadEndpoints()
    flash(`Endpoint ${created.name || created.id} created: ${created.metered_url}`)
  },
  'button[type=submit]',
)

// The dialog stays open on a refusal, with the API's message beside the fields; it closes once saved.
let editing = null
function editPrice(endpoint) {
  editing = endpoint
  $('price-endpoint').textContent = endpoint.name || endpoint.id
  editPricing.fill(endpoint.pricing || { model: 'fixed', price: endpoint.price })
  formError($('price-form'), $('price-error'), null)
  $('price-dialog').showModal()
}
$('price-form').addEventListener('submit', (e) => {
  e.preventDefault()
  const endpoint = editing
  if (!endpoint) return
  const form = e.currentTarget
  act(form.querySelector('button[type=submit]'), async () => {
    try {
      await api(`/endpoints/${endpoint.id}`, { method: 'PATCH', body: { pricing: editPricing.read() } })
    } catch (err) {
      formError(form, $('price-error'), err)
      throw err
    }
    $('price-dialog').close('save')
    await loadEndpoints()
    flash(`Pricing of ${endpoint.name || endpoint.id} saved`)
  })
})
$('price-dialog').addEventListener('close', () => {
  editing = null
})
