/** Messages of the agents, orchestrators, applications, skills, models and memory pages. */
export default { en: {}, zh: {} }
