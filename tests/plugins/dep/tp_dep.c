/* A shared library that tp_missinglib links but the loader cannot find. */
int tp_dep_value(void);
int tp_dep_value(void)
{
    return 0;
}
