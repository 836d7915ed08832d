/** Messages of the retrieval-testing and evaluation pages. */
export default { en: {}, zh: {} }
